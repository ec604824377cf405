"""Rankings of items: which member of a group is kept, and the order ranks (Beam-free).

A *ranking* (:func:`rank_items`) orders the items by preference: rank 0 is kept first; every
tie goes to the *order rank* (corpus order when it is known, else id order): :func:`corpus_ranks`,
:func:`derived_id_ranks` and :func:`id_ranks` give it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.grouping.item_ids import string_array
from sbert_pipeline.grouping.pairs import IndexedPairs

RankPolicy = Literal["first", "longest", "central", "column", "random"]
RANK_POLICIES: tuple[str, ...] = ("first", "longest", "central", "column", "random")


def rank_items(
    policy: RankPolicy,
    n: int,
    *,
    order_rank: np.ndarray | None = None,
    text_lengths: np.ndarray | None = None,
    values: np.ndarray | None = None,
    descending: bool = True,
    pairs: IndexedPairs | None = None,
    threshold: float | None = None,
    seed: int = 0,
) -> np.ndarray:
    """``(n,)`` int64 distinct ranks, 0 the most preferred item; every tie goes to ``order_rank``.

    Args:
        policy: ``first`` (corpus order: ``order_rank``), ``longest`` (most characters),
            ``central`` (largest sum of scores of its pairs ``>= threshold``, i.e. the item most
            like the most others), ``column`` (by ``values``), ``random`` (a permutation drawn
            from ``seed``).
        n: number of items.
        order_rank: ``(n,)`` distinct integers, corpus order (default: row order).
        text_lengths: ``(n,)`` characters per text, negative where unknown (``longest``).
        values: ``(n,)`` a numeric metadata column, NaN where missing (``column``).
        descending: for ``column``: the largest value first (else the smallest).
        pairs, threshold: for ``central``.
        seed: for ``random``.

    Raises:
        ValueError: an unknown policy, or what the policy needs is missing for some item that
            has a pair (at or above ``threshold`` when given).
    """
    if policy not in RANK_POLICIES:
        raise ValueError(f"unknown ranking {policy!r}; choose one of {', '.join(RANK_POLICIES)}")
    order = np.arange(n, dtype=np.int64) if order_rank is None else np.asarray(order_rank, np.int64)
    if order.shape != (n,) or not _distinct(order):
        raise ValueError(f"order_rank must hold {n} distinct integers")
    if policy == "first":
        key = np.zeros(n)
    elif policy == "random":
        return inverse_order(np.random.default_rng(seed).permutation(n))
    elif policy == "central":
        if pairs is None or threshold is None:
            raise ValueError("the central ranking needs the pairs and the threshold")
        used = pairs.above(threshold)
        weight = np.bincount(used.a, weights=used.scores, minlength=n)
        weight += np.bincount(used.b, weights=used.scores, minlength=n)
        key = -weight
    else:
        name, column = ("text lengths", text_lengths) if policy == "longest" else ("values", values)
        if column is None:
            raise ValueError(f"the {policy} ranking needs the {name} of the items")
        column = np.asarray(column, np.float64)
        if column.shape != (n,):
            raise ValueError(f"{name} must hold one value per item ({n}), got {column.shape}")
        unknown = np.isnan(column) | ((column < 0) if policy == "longest" else False)
        needed = _paired(n, pairs, threshold)
        missing = int(np.sum(unknown & needed))
        if missing:
            raise ValueError(
                f"the {policy} ranking needs the {name} of every paired item; {missing} of "
                f"{int(needed.sum())} are missing"
            )
        # Items without a needed value have no pair, so their place does not matter: last.
        column = np.where(unknown, -np.inf if policy == "longest" or descending else np.inf, column)
        key = -column if policy == "longest" or descending else column
    return inverse_order(np.lexsort((order, key)))


def _paired(n: int, pairs: IndexedPairs | None, threshold: float | None) -> np.ndarray:
    """``(n,)`` bool: items with a pair (at or above the threshold); all items without pairs."""
    if pairs is None:
        return np.ones(n, bool)
    used = pairs if threshold is None else pairs.above(threshold)
    out = np.zeros(n, bool)
    out[used.a] = out[used.b] = True
    return out


def _distinct(values: np.ndarray) -> bool:
    """Whether the integers ``values`` are all different. A ranking checks its order rank at
    every threshold of a sweep: values in ``0 .. n-1`` (every order rank this project makes)
    are counted in one ``bincount`` instead of sorted."""
    n = len(values)
    if n and values.min() >= 0 and values.max() < n:
        return bool(np.all(np.bincount(values, minlength=n) == 1))
    return len(np.unique(values)) == n


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
