"""The pairs stage: embeddings/ -> pairs/ (top-k lists, pairs above T)."""
