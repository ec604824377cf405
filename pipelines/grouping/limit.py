"""The group-size limit: a group over it is split, never published whole (Beam-free).

Transitive methods (components, mutual) chain distinct rows into groups that grow with the
corpus: on 60,000 Quora questions components put 5,174 distinct questions under one kept row.
:func:`limit_group_size` splits every group over the limit by the star rule inside the group:
its members are visited by rank and each joins the most similar kept member it is at or above
the threshold to, else it is kept. A piece still over the limit is split again the same way at
the threshold + 0.01, + 0.02, ... until every piece fits (at a level above every score each row
stands alone, so it ends). So every removed row of a split group is at or above the threshold
to its kept row, whatever the method, and no group is larger than the limit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from sbert_pipeline.grouping.adjacency import PairGraph, ranked_leaders
from sbert_pipeline.grouping.model import Grouping, grouping_from_labels
from sbert_pipeline.grouping.pairs import IndexedPairs

# How far each further split raises its level over the threshold.
LIMIT_STEP = 0.01


def limit_group_size(
    grouping: Grouping,
    pairs: IndexedPairs,
    rank: np.ndarray,
    max_size: int | None,
    graph: PairGraph | None = None,
) -> Grouping:
    """``grouping`` with every group over ``max_size`` members split (module docstring).

    Args:
        grouping: a method's groups at its threshold.
        pairs: the pairs it was made from.
        rank: ``(n,)`` distinct ranks, 0 kept first (the keep policy's).
        max_size: the most members a group may have (None: no limit).
        graph: the pairs' :class:`PairGraph`, when the caller has it.

    Returns:
        The grouping unchanged when no group is over the limit; else the split grouping, with
        ``split_groups`` counting the groups that were over it. Groups that were not over the
        limit keep their members, kept row and scores.

    Raises:
        ValueError: ``max_size`` below 2.
    """
    if max_size is None:
        return grouping
    if max_size < 2:
        raise ValueError(f"the group-size limit must be at least 2, got {max_size}")
    over = np.flatnonzero(grouping.sizes > max_size)
    if not len(over):
        return grouping
    n, rank = grouping.n, np.asarray(rank, np.int64)
    rows = np.arange(n)
    inside = np.isin(grouping.group, over)
    # Every row's kept row: its group's representative, itself when in no group.
    head = rows.copy()
    grouped = np.flatnonzero(grouping.group >= 0)
    head[grouped] = grouping.representatives()[grouping.group[grouped]]
    # The rows still to split carry their piece's label; the others a label of their own.
    piece = np.where(inside, grouping.group, -1)
    graph = graph or PairGraph(n, pairs)
    level = grouping.threshold
    while (piece >= 0).any():
        label = np.where(piece >= 0, piece, n + rows)
        leader = ranked_leaders(graph, rank, level, label)
        kept_row = np.where(leader < 0, rows, leader)
        active = piece >= 0
        sizes = np.bincount(kept_row[active], minlength=n)
        fits = active & (sizes[kept_row] <= max_size)
        head[fits] = kept_row[fits]
        piece = np.where(active & ~fits, kept_row, -1)
        level = round(level + LIMIT_STEP, 6)
    split = grouping_from_labels(
        grouping.method, grouping.threshold, head, rank, pairs, head, grouping.threshold
    )
    # Rows outside the split groups keep what the method said of them (components' chained
    # members have no score).
    outside = ~inside
    return dataclasses.replace(
        split,
        matched_score=np.where(outside, grouping.matched_score, split.matched_score).astype(
            np.float32
        ),
        reason=np.where(outside, grouping.reason, split.reason).astype(np.int8),
        pairs_used=grouping.pairs_used,
        split_groups=grouping.split_groups + len(over),
    )
