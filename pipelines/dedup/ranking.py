"""Rankings of items for the dedup methods: which member of a group is kept (Beam-free).

A *ranking* (:func:`rank_items`) orders the items by preference: rank 0 is kept first; every
tie goes to the corpus order.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from sbert_pipeline.dedup.groups import IndexedPairs, inverse_order

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
