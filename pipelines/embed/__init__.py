"""The embed stage: corpus -> embeddings/ (+ _errors/), in Beam."""
