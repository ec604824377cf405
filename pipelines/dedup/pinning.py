"""Pinned rows: rows a dedup run must keep whatever the keep rule says (Beam-free).

Two kinds of rows are pinned: rows a previous dedup version kept (``--stable-keep``,
:mod:`sbert_pipeline.dedup.previous`) and the rows of a reference corpus (``--against``,
:mod:`sbert_pipeline.dedup.against`). The method groups the rows as usual; then every group that
holds pinned rows is split around them (:func:`pin`):

* every pinned row is kept;
* every other member is removed and joins the pinned row of its group it is most similar to:
  the highest score of a loaded pair at or above ``radius`` (the threshold, or the star/split
  radius), ties to the better-ranked pinned row; a member with no such pair to any pinned row
  (chained through other members) joins the best-ranked pinned row of its group, with no
  score (reason "chained");
* each pinned row that some member joined is the representative of the group they form; a
  pinned row nobody joined is in no group.

So a group with several pinned rows becomes one group per pinned row that has members, and
the representative of a group with pinned rows is always a pinned row. Groups without pinned
rows are left as the method made them. :func:`merge_groups` first joins groups linked by extra
pairs (the corpus x reference pairs) into one, so a corpus group that holds a row matching a
reference row is removed whole.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sbert_pipeline.dedup.grouping import KEPT, NEAR_REPRESENTATIVE, THROUGH_MEMBERS, Grouping
from sbert_pipeline.dedup.groups import IndexedPairs, connected_components


def extend(grouping: Grouping, n: int) -> Grouping:
    """``grouping`` over ``n >= grouping.n`` rows, the added rows in no group (kept)."""
    extra = n - grouping.n
    if extra < 0:
        raise ValueError(f"cannot extend a grouping of {grouping.n} rows to {n}")
    if not extra:
        return grouping
    return dataclasses.replace(
        grouping,
        group=np.concatenate([grouping.group, np.full(extra, -1, np.int64)]),
        representative=np.concatenate([grouping.representative, np.zeros(extra, bool)]),
        matched=np.concatenate([grouping.matched, np.full(extra, -1, np.int64)]),
        matched_score=np.concatenate([grouping.matched_score, np.full(extra, np.nan, np.float32)]),
        reason=np.concatenate([grouping.reason, np.full(extra, KEPT, np.int8)]),
    )


def merge_groups(grouping: Grouping, links: IndexedPairs, rank: np.ndarray) -> Grouping:
    """``grouping`` with the groups (and ungrouped rows) that ``links`` join merged into one.

    The merged groups keep no meaningful representative: call :func:`pin` next with a pinned
    row in each of them (every link has a pinned end). Groups no link touches are unchanged.
    """
    if not len(links):
        return grouping
    n = grouping.n
    heads = np.arange(n)
    grouped = np.flatnonzero(grouping.group >= 0)
    heads[grouped] = grouping.representatives()[grouping.group[grouped]]
    # Each member is joined to its representative, so a group stays connected, then the links.
    rows = np.flatnonzero(heads != np.arange(n))
    edges = IndexedPairs(
        np.concatenate([np.minimum(heads[rows], rows), links.a]),
        np.concatenate([np.maximum(heads[rows], rows), links.b]),
        np.concatenate([np.ones(len(rows), np.float32), links.scores]),
    )
    roots = connected_components(n, edges)
    touched = np.zeros(n, bool)
    touched[roots[np.concatenate([links.a, links.b])]] = True
    size = np.bincount(roots, minlength=n)
    merged = touched[roots] & (size[roots] > 1)
    # Old groups keep their numbers; each merged component gets a new one above them.
    _, inverse = np.unique(roots[merged], return_inverse=True)
    group = grouping.group.copy()
    group[merged] = grouping.n_groups + inverse.reshape(-1)
    return _renumbered(grouping, group, grouping.representative & ~merged, rank)


def pin(
    grouping: Grouping,
    pinned: np.ndarray,
    rank: np.ndarray,
    pairs: IndexedPairs,
    radius: float,
) -> Grouping:
    """``grouping`` with every pinned row kept and every group that holds one split around
    its pinned rows (module docstring).

    Args:
        grouping: the method's groups (after :func:`merge_groups` when there are links).
        pinned: ``(n,)`` bool, the rows that must be kept.
        rank: ``(n,)`` distinct ints, the keep order (0 first) that breaks ties.
        pairs: the loaded pairs (a member joins a pinned row by their pair's score).
        radius: the least score of a pair a member joins a pinned row by.
    """
    n = grouping.n
    pinned = np.asarray(pinned, bool)
    if pinned.shape != (n,):
        raise ValueError(f"pinned must hold one flag per row ({n}), got {pinned.shape}")
    rank = np.asarray(rank, np.int64)
    touched_groups = np.unique(grouping.group[pinned & (grouping.group >= 0)])
    if not len(touched_groups):
        return grouping
    touched = np.isin(grouping.group, touched_groups)
    big = np.iinfo(np.int64).max

    # The best-ranked pinned row of each touched group: where a member with no pair goes.
    anchor_rows = np.flatnonzero(touched & pinned)
    best_rank = np.full(grouping.n_groups, big)
    np.minimum.at(best_rank, grouping.group[anchor_rows], rank[anchor_rows])
    by_rank = np.empty(n, np.int64)
    by_rank[rank] = np.arange(n)

    others = touched & ~pinned
    head = np.where(touched & pinned, np.arange(n), -1)
    score = np.full(n, np.nan, np.float32)
    rows = np.flatnonzero(others)
    head[rows] = by_rank[best_rank[grouping.group[rows]]]

    # Pairs (member, pinned row of the same group) at or above the radius, best first.
    near = pairs.above(radius)
    x = np.concatenate([near.a, near.b])
    y = np.concatenate([near.b, near.a])
    s = np.concatenate([near.scores, near.scores])
    keep = others[x] & pinned[y] & (grouping.group[x] == grouping.group[y])
    x, y, s = x[keep], y[keep], s[keep]
    if len(x):
        order = np.lexsort((rank[y], -s, x))
        x, y, s = x[order], y[order], s[order]
        first = np.ones(len(x), bool)
        first[1:] = x[1:] != x[:-1]
        head[x[first]] = y[first]
        score[x[first]] = s[first]

    members = np.bincount(head[rows], minlength=n) if len(rows) else np.zeros(n, np.int64)
    group = grouping.group.copy()
    representative = grouping.representative.copy()
    # Touched rows get provisional numbers above the old ones: their pinned row's.
    group[touched] = grouping.n_groups + head[touched]
    lonely = touched & pinned & (members == 0)
    group[lonely] = -1
    representative[touched] = pinned[touched] & (members[np.maximum(head[touched], 0)] > 0)
    pinned_grouping = dataclasses.replace(
        grouping,
        matched=np.where(others, head, np.where(touched, -1, grouping.matched)),
        matched_score=np.where(
            others, score, np.where(touched, np.nan, grouping.matched_score)
        ).astype(np.float32),
        reason=np.where(
            others,
            np.where(np.isnan(score), THROUGH_MEMBERS, NEAR_REPRESENTATIVE),
            np.where(touched, KEPT, grouping.reason),
        ).astype(np.int8),
    )
    return _renumbered(pinned_grouping, group, representative, rank)


def _renumbered(
    grouping: Grouping, group: np.ndarray, representative: np.ndarray, rank: np.ndarray
) -> Grouping:
    """``grouping`` with new group labels (any ints, -1: no group) numbered ``0 .. G-1`` by
    size descending, then by their representative's (else first member's) rank."""
    n = grouping.n
    grouped = np.flatnonzero(group >= 0)
    labels, inverse, counts = np.unique(group[grouped], return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    big = np.iinfo(np.int64).max
    lead = np.full(len(labels), big)
    np.minimum.at(lead, inverse, np.where(representative[grouped], rank[grouped], big))
    first = np.full(len(labels), big)
    np.minimum.at(first, inverse, rank[grouped])
    lead = np.where(lead == big, first, lead)
    order = np.lexsort((lead, -counts))
    number = np.empty(len(labels), np.int64)
    number[order] = np.arange(len(labels))
    out = np.full(n, -1, np.int64)
    out[grouped] = number[inverse]
    # Ungrouped rows have no representative, no match and are kept.
    alone = out < 0
    return dataclasses.replace(
        grouping,
        group=out,
        representative=representative & ~alone,
        sizes=counts[order].astype(np.int64),
        matched=np.where(alone, -1, grouping.matched),
        matched_score=np.where(alone, np.nan, grouping.matched_score).astype(np.float32),
        reason=np.where(alone, KEPT, grouping.reason).astype(np.int8),
    )
