"""Pure vector maths: k-means, top-k, all-pairs, tile scan, exact scores, block search.

numpy/torch/numba/faiss only: never apache_beam, nothing from the other pipelines
packages. See docs/architecture.md.
"""
