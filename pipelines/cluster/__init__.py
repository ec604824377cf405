"""The cluster stage: embeddings/ -> clusters/ (k-means or communities)."""
