"""Connected components of an undirected graph given as edge lists (scipy's csgraph; Beam-free).

The one component labelling of the pipelines: every dedup method and the duplicate groups
call :func:`component_labels` (or :func:`smallest_member_labels`, which numbers a component by
its smallest row). The threshold sweep, which needs the components at every threshold of a
grid, merges the edges once in score order instead (:func:`merge_counts`, a union-find compiled
with numba).
"""

from __future__ import annotations

import numba
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


def component_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n,)`` int64 connected-component label of every row over the edges ``(a, b)``.

    Labels are ``0 .. C-1``, numbered in the order of each component's smallest row (scipy
    labels components as it meets them, row by row). Repeated edges and either orientation
    are fine; a row without an edge is a component of its own.
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


def smallest_member_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(n,)`` int64: for every row, the smallest row of its component (a singleton: itself)."""
    labels = component_labels(n, a, b)
    _, first = np.unique(labels, return_index=True)
    return first.astype(np.int64)[labels]


def merge_counts(n: int, a: np.ndarray, b: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Component counts after merging the edges ``(a[i], b[i])`` in order, at every stop.

    Args:
        n: rows.
        a, b: ``(P,)`` the edges, in merge order (the threshold sweep: descending score).
        stops: ``(T,)`` edge counts: stop ``t`` reports the graph of the first
            ``max(stops[:t + 1])`` edges.

    Returns:
        ``(T, 4)`` int64, per stop: edges merged, groups (components of two or more rows),
        removed (rows minus components) and the largest component's size (0: no group).
    """
    a = np.ascontiguousarray(a, np.int64)
    b = np.ascontiguousarray(b, np.int64)
    stops = np.ascontiguousarray(stops, np.int64)
    if len(a) != len(b) or (len(stops) and not 0 <= stops.min() <= stops.max() <= len(a)):
        raise ValueError(f"edges ({len(a)}, {len(b)}) and stops do not match")
    return _merge_counts(n, a, b, stops)


@numba.njit(nogil=True, cache=True)
def _find(parent: np.ndarray, x: int) -> int:
    """The root of ``x``; every element on the way is re-pointed to it (path compression)."""
    root = x
    while parent[root] != root:
        root = parent[root]
    while parent[x] != root:
        following = parent[x]
        parent[x] = root
        x = following
    return root


@numba.njit(nogil=True, cache=True)
def _merge_counts(n: int, a: np.ndarray, b: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """:func:`merge_counts`: union by size, and the counts kept up to date at every union."""
    parent = np.arange(n)
    size = np.ones(n, np.int64)
    out = np.zeros((len(stops), 4), np.int64)
    position = groups = removed = largest = 0
    for t in range(len(stops)):
        for i in range(position, stops[t]):
            root_a, root_b = _find(parent, a[i]), _find(parent, b[i])
            if root_a == root_b:
                continue
            size_a, size_b = size[root_a], size[root_b]
            if size_a == 1 and size_b == 1:
                groups += 1  # two singletons make a group
            elif size_a > 1 and size_b > 1:
                groups -= 1  # two groups make one
            if size_a < size_b:
                root_a, root_b = root_b, root_a
            parent[root_b] = root_a
            size[root_a] = size_a + size_b
            removed += 1
            largest = max(largest, size_a + size_b)
        position = max(position, stops[t])
        out[t, 0] = position
        out[t, 1] = groups
        out[t, 2] = removed
        out[t, 3] = largest
    return out
