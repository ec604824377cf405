"""The ``components`` groups at one threshold and the member kept of each (Beam-free).

The groups are the connected components of the pairs ``>= T`` (scipy's csgraph, through
:func:`sbert_pipeline.dedup.groups.connected_components`); every group keeps one representative,
chosen by a ``--keep`` policy:

* ``first``: the member that comes first in the items' *order rank* (corpus order when it is
  known, else id order; :mod:`sbert_pipeline.dedup.order`);
* ``longest``: the member with the longest text (in characters), ties to the first;
* ``central``: the member with the highest mean similarity to the other members, where the
  similarity of two members is their pair's score if that pair is at or above ``T`` and 0
  otherwise (the scores of pairs under ``T`` are not known from the pairs); ties to the first;
* any other ``--keep`` value (``random``, ``column:NAME``): the member ranked first by that
  ranking (:func:`sbert_pipeline.dedup.ranking.rank_items`), given as ``preference``.

The result is a :class:`sbert_pipeline.dedup.grouping.Grouping`, the one model of a grouping that
every method returns; a removed member's ``matched_score`` is its pair's score with the
representative when that pair is ``>= T``, else NaN (a chained member,
pipelines/dedup/terms.py).

Example:
    >>> pairs = index_pairs(ids, id_a, id_b, scores)
    >>> groups = deduplicate(len(ids), pairs, 0.9, "first")
    >>> int(groups.kept.sum()) + groups.n_removed == len(ids)
    True
"""

from __future__ import annotations

import numpy as np
from sbert_pipeline.dedup.choices import KEEP_POLICIES
from sbert_pipeline.dedup.grouping import KEPT, NEAR_REPRESENTATIVE, THROUGH_MEMBERS, Grouping
from sbert_pipeline.dedup.groups import IndexedPairs, connected_components


def deduplicate(
    n: int,
    pairs: IndexedPairs,
    threshold: float,
    policy: str = "first",
    *,
    rank: np.ndarray | None = None,
    text_lengths: np.ndarray | None = None,
    preference: np.ndarray | None = None,
) -> Grouping:
    """Duplicate groups of ``n`` items at ``threshold`` and one representative per group.

    Groups are numbered ``0 .. G-1`` by size descending, equal sizes by their first member in
    the order rank.

    Args:
        n: number of items (rows).
        pairs: unique pairs over the rows (only those at or above ``threshold`` are used).
        threshold: cosine threshold, compared in float32.
        policy: how the representative is chosen (module docstring).
        rank: ``(n,)`` distinct integers, the order rank that decides ``first`` and every tie
            (default: row order).
        text_lengths: ``(n,)`` text length in characters, negative where unknown; required by
            ``longest`` for every grouped item.
        preference: ``(n,)`` distinct ranks, 0 the most preferred (a ranking of
            :func:`sbert_pipeline.dedup.ranking.rank_items`); required by a policy other than
            :data:`sbert_pipeline.dedup.choices.KEEP_POLICIES`, whose name it is.

    Raises:
        ValueError: a policy other than :data:`KEEP_POLICIES` without ``preference``, or
            ``longest`` without the length of a grouped item.
    """
    if policy not in KEEP_POLICIES and preference is None:
        raise ValueError(
            f"unknown keep policy {policy!r}; choose one of {', '.join(KEEP_POLICIES)}, or "
            "give the ranking of another (preference)"
        )
    rank = np.arange(n, dtype=np.int64) if rank is None else np.asarray(rank, np.int64)
    used = pairs.above(threshold)
    roots = connected_components(n, used)
    component_size = np.bincount(roots, minlength=n)
    grouped = np.flatnonzero(component_size[roots] > 1)

    # Number the groups by size descending, then by their first member in rank order.
    group_roots, inverse = np.unique(roots[grouped], return_inverse=True)
    first_rank = np.full(len(group_roots), np.iinfo(np.int64).max)
    np.minimum.at(first_rank, inverse, rank[grouped])
    by_size = np.lexsort((first_rank, -component_size[group_roots]))
    number = np.empty(len(group_roots), np.int64)
    number[by_size] = np.arange(len(group_roots))
    group = np.full(n, -1, np.int64)
    group[grouped] = number[inverse]
    sizes = component_size[group_roots][by_size].astype(np.int64)

    if policy in KEEP_POLICIES:
        key = _preference(policy, grouped, group, sizes, used, n, text_lengths)
    else:
        key = np.asarray(preference, np.int64)[grouped]
    order = grouped[np.lexsort((rank[grouped], key, group[grouped]))]
    representative = np.zeros(n, bool)
    if len(order):
        starts = np.ones(len(order), bool)
        starts[1:] = group[order][1:] != group[order][:-1]
        representative[order[starts]] = True
    matched, matched_score = _matches(group, representative, used)
    removed = matched >= 0
    reason = np.full(n, KEPT, np.int8)
    reason[removed] = np.where(
        np.isnan(matched_score[removed]), THROUGH_MEMBERS, NEAR_REPRESENTATIVE
    )
    return Grouping(
        method="components",
        threshold=threshold,
        group=group,
        representative=representative,
        sizes=sizes,
        matched=matched,
        matched_score=matched_score,
        reason=reason,
        pairs_used=len(used),
    )


def _preference(
    policy: str,
    grouped: np.ndarray,
    group: np.ndarray,
    sizes: np.ndarray,
    used: IndexedPairs,
    n: int,
    text_lengths: np.ndarray | None,
) -> np.ndarray:
    """Per grouped row, a key whose smallest value in a group wins (before the rank)."""
    if policy == "first":
        return np.zeros(len(grouped), np.int64)
    if policy == "longest":
        lengths = None if text_lengths is None else np.asarray(text_lengths, np.int64)
        unknown = len(grouped) if lengths is None else int(np.sum(lengths[grouped] < 0))
        if unknown:
            raise ValueError(
                f"--keep longest needs the texts of all grouped items; {unknown} of "
                f"{len(grouped)} are unknown"
            )
        return -lengths[grouped]
    sums = np.bincount(used.a, weights=used.scores, minlength=n)
    sums += np.bincount(used.b, weights=used.scores, minlength=n)
    others = sizes[group[grouped]] - 1
    return -(sums[grouped] / others)


def _matches(
    group: np.ndarray, representative: np.ndarray, used: IndexedPairs
) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` each removed member's representative row (-1: kept) and their pair's score
    where that pair is among ``used`` (NaN otherwise: a chained member, or kept)."""
    n = len(group)
    heads = np.full(int(group.max()) + 1 if n and group.max() >= 0 else 0, -1, np.int64)
    rows = np.flatnonzero(representative)
    heads[group[rows]] = rows
    removed = (group >= 0) & ~representative
    matched = np.where(removed, heads[np.maximum(group, 0)] if len(heads) else -1, -1)
    score = np.full(n, np.nan, np.float32)
    # Every pair at or above the threshold lies inside one group, by construction.
    a_is_rep, b_is_rep = representative[used.a], representative[used.b]
    score[used.b[a_is_rep]] = used.scores[a_is_rep]
    score[used.a[b_is_rep]] = used.scores[b_is_rep]
    return matched.astype(np.int64), score
