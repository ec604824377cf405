"""The index stage: embeddings/ -> index/ (FAISS), planned under a budget."""
