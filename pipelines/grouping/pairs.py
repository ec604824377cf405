"""Similar pairs over row numbers, score look-ups and the checks every method makes (Beam-free).

Items are the rows ``0 .. n-1`` of an id list; :class:`IndexedPairs` holds each pair once as
rows ``a < b`` with its float32 score. Scores and thresholds are compared in float32, as the
pairs stage compares them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.grouping.item_ids import string_array
from sbert_pipeline.vectors.checks import check_cosine

from sbert_core.graph import smallest_node_labels


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


def pair_components(n: int, pairs: IndexedPairs) -> np.ndarray:
    """``(n,)`` int64: for every row, the smallest row of its component over ``pairs``."""
    return smallest_node_labels(n, pairs.a, pairs.b)


def lookup_scores(pairs: IndexedPairs, n: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Scores of the pairs ``(x[i], y[i])``; NaN where the pair is not given."""
    key = pairs.a * n + pairs.b
    # Pairs usually come sorted by (a, b) (pairs stage, index_pairs): skip the sort then.
    order = np.arange(len(key)) if np.all(key[1:] >= key[:-1]) else np.argsort(key, kind="stable")
    sorted_key = key[order]
    wanted = np.minimum(x, y) * n + np.maximum(x, y)
    position = np.clip(np.searchsorted(sorted_key, wanted), 0, max(len(key) - 1, 0))
    out = np.full(len(wanted), np.nan, np.float32)
    if len(key):
        found = sorted_key[position] == wanted
        out[found] = pairs.scores[order[position[found]]]
    return out


def check_threshold(threshold: float) -> None:
    """Refuse a threshold outside ``[-1, 1]`` (or NaN)."""
    check_cosine(threshold)


def check_grouping_inputs(n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray) -> None:
    """Refuse a bad threshold, a rank that is not a permutation, or pairs outside the rows."""
    check_threshold(threshold)
    rank = np.asarray(rank)
    permutation = (
        rank.shape == (n,)
        and np.issubdtype(rank.dtype, np.integer)
        and (n == 0 or (rank.min() >= 0 and rank.max() < n))
        and bool(np.all(np.bincount(rank, minlength=n) == 1))
    )
    if not permutation:
        raise ValueError(f"rank must be a permutation of 0 .. {n - 1} (see rank_items)")
    if len(pairs) and (pairs.a.min() < 0 or pairs.b.max() >= n or np.any(pairs.a >= pairs.b)):
        raise ValueError(f"pairs must be rows a < b in [0, {n})")
