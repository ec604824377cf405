"""Similar pairs over row numbers, their components and the threshold sweep (Beam-free).

Items are the rows ``0 .. n-1`` of an id list; pairs are :class:`IndexedPairs` over those rows.
At a threshold ``T`` the *duplicate groups* of the ``components`` method are the connected
components of the graph whose edges are the pairs with ``score >= T``; an item without such a
pair is a singleton and not a group (the groups and the member kept of each:
:func:`sbert_pipeline.dedup.deduplicate.deduplicate`, a
:class:`sbert_pipeline.dedup.grouping.Grouping`).

``removed = sum over groups of (size - 1) = n - components``, which equals the number of
unions that merge two components: the threshold sweep (:func:`threshold_sweep`) gets the
removed count of every threshold from one pass over the pairs sorted by descending score,
merging into one union-find as the threshold falls (compiled with numba:
:func:`sbert_pipeline.vectors.components.merge_counts`). The components at one threshold are scipy's
(:func:`sbert_pipeline.vectors.components.component_labels`).

Scores and thresholds are compared in float32, as the pairs stage compares them. The order
ranks (:func:`corpus_ranks`, :func:`derived_id_ranks`, :func:`id_ranks`) decide ``first`` and
every tie.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.dedup.item_ids import string_array
from sbert_pipeline.vectors.checks import check_cosine
from sbert_pipeline.vectors.components import merge_counts, smallest_member_labels
from sbert_pipeline.vectors.records import field_record


@dataclass(frozen=True)
class IndexedPairs:
    """Unique item pairs ``a < b`` (row numbers) with their scores."""

    a: np.ndarray  # (P,) int64
    b: np.ndarray  # (P,) int64
    scores: np.ndarray  # (P,) float32

    def __len__(self) -> int:
        return len(self.a)

    def above(self, threshold: float) -> IndexedPairs:
        """The pairs with ``score >= threshold`` (compared in float32)."""
        keep = self.scores >= np.float32(threshold)
        return IndexedPairs(self.a[keep], self.b[keep], self.scores[keep])

    @classmethod
    def empty(cls) -> IndexedPairs:
        """No pairs."""
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))


def index_pairs(
    ids: pa.Array | Sequence[str],
    id_a: pa.Array | Sequence[str],
    id_b: pa.Array | Sequence[str],
    scores: np.ndarray | Sequence[float],
) -> IndexedPairs:
    """Pairs of string ids as unique row pairs ``a < b``; a pair given twice keeps its best score.

    Args:
        ids: every item's id, unique; row ``i`` is item ``i``.
        id_a, id_b, scores: the pairs, in either orientation, possibly repeated (pairs derived
            from neighbour lists name most pairs twice).

    Raises:
        ValueError: a pair names an id that is not in ``ids``, pairs an id with itself, or has
            a NaN or infinite score (a NaN compares false with every threshold, so the pair
            would vanish without a word).
    """
    ids = string_array(ids)
    scores = np.asarray(scores, dtype=np.float32)
    bad = ~np.isfinite(scores)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        first, second = string_array(id_a)[row].as_py(), string_array(id_b)[row].as_py()
        raise ValueError(
            f"the pair ({first!r}, {second!r}) has "
            f"score {scores[row]}; the pairs were computed from NaN or infinite vectors, rerun "
            "sbert pairs"
        )
    rows = []
    for column in (id_a, id_b):
        column = string_array(column)
        found = pc.index_in(column, value_set=ids)
        if found.null_count:
            missing = column.filter(pc.is_null(found))
            raise ValueError(
                f"{len(missing)} pair ends name ids that are not among the {len(ids)} embedded "
                f"ids (first: {missing[0].as_py()!r}); the pairs were computed from other "
                "embeddings"
            )
        rows.append(found.to_numpy(zero_copy_only=False).astype(np.int64))
    if len(rows[0]) != len(scores):
        raise ValueError(f"{len(rows[0])} pairs but {len(scores)} scores")
    a, b = np.minimum(rows[0], rows[1]), np.maximum(rows[0], rows[1])
    if np.any(a == b):
        first = int(a[np.argmax(a == b)])
        raise ValueError(f"the pairs pair an id with itself ({ids[first].as_py()!r})")
    key = a * max(len(ids), 1) + b
    order = np.lexsort((-scores, key))  # by pair, best score first
    first_of_pair = np.ones(len(order), bool)
    first_of_pair[1:] = key[order][1:] != key[order][:-1]
    keep = order[first_of_pair]
    return IndexedPairs(a[keep], b[keep], scores[keep])


def connected_components(n: int, pairs: IndexedPairs) -> np.ndarray:
    """``(n,)`` int64: for every item, the smallest row of its component (singletons: itself)."""
    return smallest_member_labels(n, pairs.a, pairs.b)


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


@dataclass(frozen=True)
class Histogram:
    """Counts of pair scores in equal-width bins: bin ``i`` is ``[edges[i], edges[i + 1])``,
    the last bin also holds scores at or above its upper edge (float32 rounding can give
    cosines a hair above 1)."""

    edges: np.ndarray  # (B + 1,) float64
    counts: np.ndarray  # (B,) int64

    def to_json(self) -> dict:
        """For the manifest."""
        return {"edges": [round(e, 6) for e in self.edges.tolist()], "counts": self.counts.tolist()}


def similarity_histogram(scores: np.ndarray, low: float, width: float = 0.01) -> Histogram:
    """Histogram of ``scores`` from ``low`` (rounded down to a multiple of ``width``) to 1.

    A score falls in the bin whose lower edge it reaches in float32, as thresholds compare, so
    the pairs counted from the bin at ``T`` upwards are exactly the pairs used at ``T``.

    Raises:
        ValueError: ``width <= 0``, ``low`` outside [-1, 1), or a score below ``low``.
    """
    if width <= 0:
        raise ValueError(f"histogram bin width must be positive, got {width}")
    check_cosine(low, "histogram low end", upper_open=True)
    scores = np.asarray(scores, np.float32)
    first = math.floor(round(low / width, 6))
    n_bins = max(1, math.ceil(round(1.0 / width, 6)) - first)
    edges = np.round((first + np.arange(n_bins + 1)) * width, 6)
    if len(scores) and scores.min() < np.float32(edges[0]):
        raise ValueError(f"a score ({scores.min()}) is below the histogram's low end {low}")
    bins = np.searchsorted(edges.astype(np.float32), scores, side="right") - 1
    bins = np.clip(bins, 0, n_bins - 1)
    return Histogram(edges, np.bincount(bins, minlength=n_bins).astype(np.int64))


def id_ranks(ids: pa.Array | Sequence[str]) -> np.ndarray:
    """``(n,)`` int64 rank of every id in string (code point) order."""
    order = pc.sort_indices(string_array(ids)).to_numpy()
    return inverse_order(order)


def derived_id_ranks(ids: pa.Array | Sequence[str]) -> np.ndarray | None:
    """Corpus order from ids derived as ``{file}:{row}`` (the embed stage's ids without an id
    field): by file name, then row number. None if some id is not of that form.

    Parsed and sorted in Arrow: Python strings for every id cost ~1 GiB at 5M rows.
    """
    values = string_array(ids)
    if len(values) == 0:
        return np.zeros(0, np.int64)
    # Greedy ``.*``: the row is what follows the last colon, as str.rpartition splits it.
    parts = pc.extract_regex(values, r"(?s)^(?P<file>.*):(?P<row>[0-9]+)$")
    if parts.null_count:
        return None
    try:
        rows = pc.cast(parts.field("row"), pa.int64())
    except pa.ArrowInvalid:  # more digits than an int64 holds: not a row number
        return None
    table = pa.table({"file": parts.field("file"), "row": rows})
    order = pc.sort_indices(table, sort_keys=[("file", "ascending"), ("row", "ascending")])
    return inverse_order(order.to_numpy())


def corpus_ranks(positions: np.ndarray) -> np.ndarray:
    """``(n,)`` int64 rank from ``(n, 2)`` corpus positions ``(file number, row)``."""
    return inverse_order(np.lexsort((positions[:, 1], positions[:, 0])))


def inverse_order(order: np.ndarray) -> np.ndarray:
    """``rank`` with ``rank[order[i]] == i``: the place of every row in ``order``."""
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank
