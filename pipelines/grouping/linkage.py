"""Average-linkage agglomerative clustering over the pair graph, cut at any threshold (Beam-free).

Clusters merge while the mean score between them is ``>= T``; pairs not given (scores below
the floor) count as ``missing_score``. Merge heights never increase (the mean of a merged
cluster is a weighted mean of its parts' means), so one run down to the lowest threshold gives
every higher threshold as a prefix of the merges (:class:`Dendrogram`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.grouping.model import Grouping, grouping_from_labels
from sbert_pipeline.grouping.pairs import IndexedPairs, check_grouping_inputs, check_threshold

from sbert_core.graph import component_labels


@dataclass(frozen=True)
class Dendrogram:
    """Average-linkage merges, highest first: merge ``i`` joins the clusters holding the rows
    ``left[i]`` and ``right[i]`` at mean score ``height[i]`` (non-increasing)."""

    n: int
    left: np.ndarray  # (M,) int64 a row of one cluster
    right: np.ndarray  # (M,) int64 a row of the other
    height: np.ndarray  # (M,) float64
    missing_score: float
    stop: float  # merges were made down to this mean score

    def cut(self, threshold: float, rank: np.ndarray, pairs: IndexedPairs) -> Grouping:
        """The clusters of every merge at mean score ``>= threshold`` as a :class:`Grouping`.

        Args:
            threshold: at or above the ``stop`` this dendrogram was built down to.
            rank: the ranking that picks each cluster's representative.
            pairs: the pairs it was built from (for the members' scores).

        Raises:
            ValueError: ``threshold`` below ``stop`` (those merges were not made), or bad
                inputs.
        """
        check_grouping_inputs(self.n, pairs, threshold, rank)
        if np.float32(threshold) < np.float32(self.stop):
            raise ValueError(
                f"the dendrogram was built down to {self.stop}; it cannot be cut at {threshold}"
            )
        # Heights are float64 means; a pair's own score is its float32 value, so comparing
        # with the float32 threshold's value agrees with IndexedPairs.above. The merges at or
        # above the threshold are the prefix before the first one below it.
        below = np.flatnonzero(self.height < float(np.float32(threshold)))
        take = int(below[0]) if len(below) else len(self.height)
        labels = component_labels(self.n, self.left[:take], self.right[:take])
        return grouping_from_labels("average", threshold, labels, rank, pairs)


def average_linkage(
    n: int, pairs: IndexedPairs, stop: float, missing_score: float = 0.0
) -> Dendrogram:
    """Average-linkage merges over the pair graph down to mean score ``stop``.

    Between clusters ``A`` and ``B`` the mean is ``(sum of given scores + missing_score *
    pairs not given) / (|A| |B|)``. Only clusters joined by a given pair are ever compared, so
    ``missing_score`` should not exceed ``stop``: two clusters with no given pair between them
    are never merged. Costs about ``P log P`` for ``P`` pairs: each merge folds the smaller
    cluster's neighbour table into the larger one's and queues only the means that may have
    risen.

    Raises:
        ValueError: ``stop`` outside ``[-1, 1]`` or ``missing_score > stop``.
    """
    check_threshold(stop)
    if missing_score > stop:
        raise ValueError(
            f"missing_score ({missing_score}) above the stop threshold ({stop}) would merge "
            "clusters that share no pair"
        )
    # A cluster is named by one of its rows. Its neighbour table maps a neighbouring cluster
    # to sum + 1j * count over the given pairs between them: one complex number per entry adds
    # both with one operation.
    tables: dict[int, dict[int, complex]] = {}
    for a, b, s in zip(pairs.a.tolist(), pairs.b.tolist(), pairs.scores.tolist(), strict=True):
        tables.setdefault(a, {})[b] = complex(s, 1)
        tables.setdefault(b, {})[a] = complex(s, 1)
    size = dict.fromkeys(tables, 1)
    limit = float(np.float32(stop))

    def mean(x: int, y: int) -> float:
        value, total = tables[x][y], size[x] * size[y]
        return (value.real + missing_score * (total - value.imag)) / total

    # Heap keys are upper bounds of the current means: when two clusters merge, the means of
    # the neighbours of the smaller one are queued afresh; a neighbour of only the larger one
    # has its mean lowered (more pairs, none of them given), so its old key stays an upper
    # bound and is corrected when it comes to the top.
    heap = [
        (-float(s), a, b)
        for a, b, s in zip(pairs.a.tolist(), pairs.b.tolist(), pairs.scores.tolist(), strict=True)
        if s >= limit
    ]
    heapq.heapify(heap)
    left, right, height = [], [], []
    while heap:
        negative, x, y = heapq.heappop(heap)
        if x not in tables or y not in tables:
            continue  # one side was merged into another cluster since
        current = mean(x, y)
        if current < -negative:
            if current >= limit:
                heapq.heappush(heap, (-current, x, y))
            continue
        left.append(x)
        right.append(y)
        height.append(current)
        big, small = (x, y) if len(tables[x]) >= len(tables[y]) else (y, x)
        table, other = tables[big], tables.pop(small)
        del table[small], other[big]
        size[big] += size.pop(small)
        for z, value in other.items():
            table[z] = table.get(z, 0j) + value
            neighbour = tables[z]
            neighbour[big] = table[z]
            del neighbour[small]
            joined = mean(big, z)
            if joined >= limit:
                heapq.heappush(heap, (-joined, big, z))
    return Dendrogram(
        n=n,
        left=np.array(left, np.int64),
        right=np.array(right, np.int64),
        height=np.array(height, np.float64),
        missing_score=missing_score,
        stop=stop,
    )
