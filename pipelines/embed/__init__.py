"""The embed stage: corpus -> embeddings/ (+ errors/), in Beam."""
