"""Pure-Python references for the dedup components and threshold sweep (the test oracle).

These are the union-find implementations production used before it moved to scipy's csgraph
(``sbert_core.graph.component_labels``) and a numba-compiled sweep
(``sbert_pipeline.grouping.sweep.merge_counts``). The tests check the production code against
them, and ``benchmarks/dedup_scale.py`` times them as the "before".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.sweep import SweepPoint


class UnionFind:
    """Disjoint sets over ``0 .. n-1`` with path compression and union by size.

    Plain Python lists: an element access costs less on a list than on a numpy array, and the
    loops here are sequential by nature.
    """

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))
        self.size = [1] * n

    def find(self, x: int) -> int:
        """The root of ``x``'s set; every element on the way is re-pointed to the root."""
        parent = self.parent
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a: int, b: int) -> bool:
        """Merge the sets of ``a`` and ``b``; False when they were already one set."""
        root_a, root_b = self.find(a), self.find(b)
        if root_a == root_b:
            return False
        if self.size[root_a] < self.size[root_b]:
            root_a, root_b = root_b, root_a
        self.parent[root_b] = root_a
        self.size[root_a] += self.size[root_b]
        return True

    def roots(self) -> np.ndarray:
        """``(n,)`` int64: the root of every element."""
        return np.fromiter((self.find(x) for x in range(len(self.parent))), np.int64)


def connected_components(n: int, pairs: IndexedPairs) -> np.ndarray:
    """``(n,)`` int64: for every item, the root row of its component (singletons: itself)."""
    sets = UnionFind(n)
    for a, b in zip(pairs.a.tolist(), pairs.b.tolist(), strict=True):
        sets.union(a, b)
    return sets.roots()


def smallest_member(roots: np.ndarray) -> np.ndarray:
    """Any component labelling renumbered by each component's smallest row."""
    _, first, inverse = np.unique(roots, return_index=True, return_inverse=True)
    return first.astype(np.int64)[inverse.reshape(-1)]


def threshold_sweep(n: int, pairs: IndexedPairs, thresholds: Sequence[float]) -> list[SweepPoint]:
    """The sweep as ``sbert_pipeline.dedup.groups.threshold_sweep`` computed it in pure Python."""
    order = np.argsort(-pairs.scores, kind="stable")
    a, b = pairs.a[order].tolist(), pairs.b[order].tolist()
    descending = -pairs.scores[order]  # ascending, for searchsorted
    sets = UnionFind(n)
    size = sets.size
    position = groups = removed = largest = 0
    answers: dict[float, SweepPoint] = {}
    for threshold in sorted(set(thresholds), reverse=True):
        stop = int(np.searchsorted(descending, -np.float32(threshold), side="right"))
        for i in range(position, stop):
            root_a, root_b = sets.find(a[i]), sets.find(b[i])
            if root_a == root_b:
                continue
            size_a, size_b = size[root_a], size[root_b]
            groups += 1 if size_a == size_b == 1 else (-1 if size_a > 1 and size_b > 1 else 0)
            sets.union(root_a, root_b)
            removed += 1
            largest = max(largest, size_a + size_b)
        position = max(position, stop)
        answers[threshold] = SweepPoint(
            threshold=threshold,
            pairs=position,
            groups=groups,
            grouped=removed + groups,
            removed=removed,
            kept=n - removed,
            largest=largest,
        )
    return [answers[threshold] for threshold in thresholds]


def duplicate_pair_components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sbert_core.training.duplicate_pairs.smallest_node_labels`` as it was: numbered by the
    smallest node."""
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        rx, ry = root(x), root(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    return np.array([root(i) for i in range(n)], dtype=np.int64)
