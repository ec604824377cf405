"""Component counts at every threshold of a grid, in one pass over the pairs (Beam-free).

At a threshold ``T`` the groups of the ``components`` method are the connected components of
the pairs with ``score >= T``. ``removed = sum over groups of (size - 1) = n - components``,
which equals the number of unions that merge two components: :func:`threshold_sweep` gets the
removed count of every threshold from one pass over the pairs sorted by descending score,
merging into one union-find as the threshold falls (:func:`merge_counts`, compiled with
numba). The components at one threshold are :mod:`sbert_core.graph`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.vectors.checks import check_cosine
from sbert_pipeline.vectors.records import field_record


@dataclass(frozen=True)
class SweepPoint:
    """What deduplication at one threshold would do."""

    threshold: float
    pairs: int  # pairs at or above the threshold
    groups: int
    grouped: int  # items in some group
    removed: int
    kept: int
    largest: int  # size of the largest group (0: no groups)

    def to_json(self) -> dict:
        """For the manifest."""
        return field_record(self)


def threshold_sweep(n: int, pairs: IndexedPairs, thresholds: Sequence[float]) -> list[SweepPoint]:
    """Groups and removed items at every threshold, in one pass over the pairs.

    The pairs are merged into one union-find in descending score order; when the scores drop
    below the next threshold, the counts so far are that threshold's answer. A union that
    joins two singletons adds a group, one that joins two groups takes one away.

    Returns:
        One :class:`SweepPoint` per threshold, in the order given.
    """
    order = np.argsort(-pairs.scores, kind="stable")
    descending = -pairs.scores[order]  # ascending, for searchsorted
    distinct = sorted(set(thresholds), reverse=True)
    # Pairs down to each threshold: the first position whose score is below it.
    limits = -np.array(distinct, np.float64).astype(np.float32)
    stops = np.searchsorted(descending, limits, side="right").astype(np.int64)
    counts = merge_counts(n, pairs.a[order], pairs.b[order], stops).tolist()
    answers: dict[float, SweepPoint] = {}
    for threshold, (position, groups, removed, largest) in zip(distinct, counts, strict=True):
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


def sweep_thresholds(start: float, stop: float, step: float, *extra: float) -> list[float]:
    """``start, start + step, ..., <= stop`` plus ``extra`` values, ascending, without duplicates.

    Grid values are rounded to 6 decimals so that 0.8 + 10 * 0.01 is 0.9; extras are kept as
    given (the chosen threshold must be the one compared).

    Raises:
        ValueError: a bound outside [-1, 1], ``start > stop`` or ``step <= 0``.
    """
    for name, value in (("start", start), ("stop", stop)):
        check_cosine(value, f"sweep {name}")
    if start > stop or not step > 0:  # written so that a NaN step is refused
        raise ValueError(f"the sweep needs start <= stop and step > 0, got {start}:{stop}:{step}")
    count = math.floor((stop - start) / step + 1e-9) + 1
    values = {round(start + i * step, 6) for i in range(count)}
    values.update(float(value) for value in extra)
    return sorted(values)


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
