"""The pairs prepared once for every threshold of a sweep: each row's pairs as one adjacency
table, and each pair's place in both ends' neighbour lists (Beam-free).

A sweep asks ``star`` and ``mutual`` for their groups at 20 or so thresholds over the same
pairs. Sorting the pairs by row (star's ranked rule walks each row's pairs) or by score within
a row (mutual's neighbour places) is the costly part of one threshold, and it does not depend
on the threshold, so :class:`PairGraph` does it once:

* the adjacency holds every loaded pair twice (once from each end); a threshold or a radius
  is a filter on the scores inside the compiled walk (:func:`ranked_leaders`), never a new sort;
* a pair's place in a row's list (score descending, then row ascending) is the same among the
  pairs at or above any threshold the pair reaches as among all the pairs: every pair before
  it in the list scores at least as high (:meth:`PairGraph.places`).

Memory: 2 x (int32 row + float32 score) per pair, plus the ``(n + 1,)`` row starts.
"""

from __future__ import annotations

from functools import cached_property

import numba
import numpy as np
from sbert_pipeline.grouping.pairs import IndexedPairs


class PairGraph:
    """Every pair of ``pairs`` listed from both ends, grouped by row.

    Args:
        n: rows.
        pairs: unique pairs ``a < b`` over the rows.

    Attributes:
        starts: ``(n + 1,)`` int64: row ``i``'s pairs are ``others[starts[i]:starts[i + 1]]``.
        others: ``(2P,)`` int32 (int64 from 2**31 rows) the other end of each listed pair.
        scores: ``(2P,)`` float32 its score.
    """

    def __init__(self, n: int, pairs: IndexedPairs) -> None:
        self.n, self.pairs = n, pairs
        ends = np.concatenate([pairs.a, pairs.b])
        # A counting sort by row: rows are 0 .. n-1, so this is linear and needs no argsort.
        counts = np.bincount(ends, minlength=n)
        self.starts = np.zeros(n + 1, np.int64)
        np.cumsum(counts, out=self.starts[1:])
        order = _counting_order(ends, self.starts)
        del ends
        # Rows fit int32 up to 2**31 items: 4 bytes a listed pair fewer than int64.
        others = np.empty(2 * len(pairs), np.int32 if n < 2**31 else np.int64)
        others[: len(pairs)], others[len(pairs) :] = pairs.b, pairs.a
        self.others = others[order]
        del others
        scores = np.concatenate([pairs.scores, pairs.scores])
        self.scores = scores[order]

    @cached_property
    def places(self) -> tuple[np.ndarray, np.ndarray]:
        """``(P,)`` twice: the place of ``b`` in ``a``'s neighbour list for every pair, and of
        ``a`` in ``b``'s (0 = nearest; score descending, then row ascending)."""
        pairs = self.pairs
        row, other = np.concatenate([pairs.a, pairs.b]), np.concatenate([pairs.b, pairs.a])
        order = np.lexsort((other, -np.concatenate([pairs.scores, pairs.scores]), row))
        starts = np.searchsorted(row[order], np.arange(self.n))
        place = np.empty(len(row), np.int64)
        place[order] = np.arange(len(row)) - starts[row[order]]
        return place[: len(pairs)], place[len(pairs) :]


def ranked_leaders(
    graph: PairGraph, rank: np.ndarray, radius: float, component: np.ndarray | None = None
) -> np.ndarray:
    """The ranked rule over the pairs ``>= radius`` (inside one ``component`` label when given).

    Visit the rows by rank; a row joins the most similar kept, better-ranked row it has such a
    pair with (equal scores: the better-ranked), else it is kept.

    Returns:
        ``(n,)`` int64: the kept row each row joined, -1 for a kept row.
    """
    visit = np.empty(graph.n, np.int64)
    visit[rank] = np.arange(graph.n)
    same = np.zeros(graph.n, np.int64) if component is None else component
    return _ranked_kernel(
        visit, rank, graph.starts, graph.others, graph.scores, np.float32(radius), same
    )


@numba.njit(nogil=True, cache=True)
def _counting_order(ends, starts):  # pragma: no cover - compiled
    """A stable order of ``ends`` by value, given each value's start in the sorted order."""
    fill = starts[:-1].copy()
    order = np.empty(len(ends), np.int64)
    for position in range(len(ends)):
        value = ends[position]
        order[fill[value]] = position
        fill[value] += 1
    return order


@numba.njit(nogil=True, cache=True)
def _ranked_kernel(visit, rank, starts, others, scores, radius, component):  # pragma: no cover
    """``leader[i]``: the kept row ``i`` joins, -1 when ``i`` is kept (compiled)."""
    n = len(rank)
    leader = np.full(n, -1, np.int64)
    kept = np.zeros(n, np.bool_)
    for i in visit:
        best = -1
        best_score = -np.inf
        for position in range(starts[i], starts[i + 1]):
            s = scores[position]
            if s < radius:
                continue
            j = others[position]
            if component[j] != component[i] or rank[j] >= rank[i] or not kept[j]:
                continue
            if s > best_score or (s == best_score and rank[j] < rank[best]):
                best, best_score = j, s
        if best < 0:
            kept[i] = True
        else:
            leader[i] = best
    return leader
