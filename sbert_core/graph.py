"""Connected components of ``n`` nodes from edge arrays (scipy's csgraph; Beam-free).

The one component labelling of the project: the duplicate groups of training
(:mod:`sbert_core.training.duplicate_pairs`) and every grouping method of the pipelines'
grouping library call :func:`component_labels` or :func:`smallest_node_labels`.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


def component_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n,)`` int64 connected-component label of every node over the edges ``(a, b)``.

    Labels are ``0 .. C-1``, numbered in the order of each component's smallest node (scipy
    labels components as it meets them, node by node). Repeated edges and either orientation
    are fine; a node without an edge is a component of its own.

    Raises:
        ValueError: ``a`` and ``b`` differ in length.
    """
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    if len(a) != len(b):
        raise ValueError(f"{len(a)} edge starts but {len(b)} edge ends")
    if n == 0:
        return np.zeros(0, np.int64)
    # Repeated edges are summed into one entry; only the structure counts (an explicit zero
    # would still be an edge to csgraph).
    graph = coo_matrix((np.ones(len(a), bool), (a, b)), shape=(n, n)).tocsr()
    return connected_components(graph, directed=False)[1].astype(np.int64)


def smallest_node_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n,)`` int64: for every node, the smallest node of its component (alone: itself)."""
    labels = component_labels(n, a, b)
    _, first = np.unique(labels, return_index=True)
    return first.astype(np.int64)[labels]
