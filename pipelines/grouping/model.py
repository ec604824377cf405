"""One method's duplicate groups at one threshold: :class:`Grouping` and its parts (Beam-free).

A :class:`Grouping` is the one model of a grouping (every method returns one, and the writers
read it). It holds a group number per item (-1 for an item in no group), one representative per
group (the kept member), and for every removed member the row it was matched to (its
representative), that pair's score and a reason. The words the outputs use for the reasons are
defined here once (docs/architecture.md, "Dedup glossary").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sbert_pipeline.grouping.pairs import IndexedPairs, lookup_scores

# A removed member whose own similarity to the kept row (the representative) is under the
# threshold, or not among the pairs: it is in the group because it is similar to another
# member, which is similar to the kept row (or to a further member). Components make them;
# a star never does.
CHAINED = "chained"
CHAINED_MEANING = (
    "in the group only because it is similar to another member, not to the kept row: its own "
    "similarity to the kept row is under the threshold or not among the pairs"
)

# Why a member is in its group. Code 0 is "kept" (a representative or an item in no group).
REASONS: tuple[str, ...] = (
    "kept",
    "similar to its representative",
    CHAINED,  # similar to another member, not to the representative
    # A copy of another row's normalised text (exact-copy embeddings; grouping/copies.py).
    "same normalised text",
)
KEPT, NEAR_REPRESENTATIVE, THROUGH_MEMBERS, SAME_TEXT = 0, 1, 2, 3


@dataclass(frozen=True)
class Grouping:
    """Duplicate groups from one method at one threshold.

    Groups are numbered ``0 .. G-1`` by size descending, equal sizes by their representative's
    rank.
    """

    method: str
    threshold: float
    group: np.ndarray  # (n,) int64, -1 for an item in no group
    representative: np.ndarray  # (n,) bool, the one kept member of each group
    sizes: np.ndarray  # (G,) int64 members per group
    matched: np.ndarray  # (n,) int64: a removed item's representative row, -1 for kept items
    matched_score: np.ndarray  # (n,) float32: score with it, NaN if kept or not a given pair
    # (n,) int8 index into REASONS: "similar to its representative" when matched_score reaches
    # the threshold (star: rep_threshold), else "chained"; "same
    # normalised text" for a copy joined by grouping/copies.py.
    reason: np.ndarray
    pairs_used: int  # pairs at or above the threshold
    # Groups that were over the group-size limit and were split (grouping/limit.py).
    split_groups: int = 0

    @property
    def n(self) -> int:
        """Items in all."""
        return len(self.group)

    @property
    def removed(self) -> np.ndarray:
        """``(n,)`` bool: group members other than the representative."""
        return (self.group >= 0) & ~self.representative

    @property
    def kept(self) -> np.ndarray:
        """``(n,)`` bool: representatives and items in no group."""
        return ~self.removed

    @property
    def n_removed(self) -> int:
        """Items removed."""
        return int(self.sizes.sum()) - len(self.sizes)

    @property
    def n_groups(self) -> int:
        """Groups of two or more items."""
        return len(self.sizes)

    @property
    def largest(self) -> int:
        """Size of the largest group (0 when there are none)."""
        return int(self.sizes.max()) if len(self.sizes) else 0

    def labels(self) -> np.ndarray:
        """``(n,)`` int64 partition label: the group, or ``G + row`` for an item in no group."""
        out = self.group.copy()
        alone = out < 0
        out[alone] = len(self.sizes) + np.flatnonzero(alone)
        return out

    def reasons(self) -> list[str]:
        """The reason of every item, as text."""
        return [REASONS[code] for code in self.reason.tolist()]

    def representatives(self) -> np.ndarray:
        """``(G,)`` int64: the representative row of each group."""
        rows = np.flatnonzero(self.representative)
        out = np.empty(self.n_groups, np.int64)
        out[self.group[rows]] = rows
        return out

    def members(self, group: int, rank: np.ndarray | None = None) -> np.ndarray:
        """Rows of one group, the representative first, then by ``rank`` (default: row)."""
        rows = np.flatnonzero(self.group == group)
        keys = rows if rank is None else rank[rows]
        return rows[np.lexsort((keys, ~self.representative[rows]))]


def grouping_from_labels(
    method: str,
    threshold: float,
    labels: np.ndarray,
    rank: np.ndarray,
    pairs: IndexedPairs,
    representative_row: np.ndarray | None = None,
    radius: float | None = None,
) -> Grouping:
    """A :class:`Grouping` from a partition label per row.

    ``representative_row`` gives each row's representative (constant within a label); by
    default the best-ranked row of the label. A removed row is "similar to its representative"
    when their score reaches ``radius`` (default ``threshold``).
    """
    n = len(labels)
    inverse, counts = dense_labels(labels)
    if representative_row is None:
        best = np.full(len(counts), np.iinfo(np.int64).max)
        np.minimum.at(best, inverse, rank)
        by_rank = np.empty(n, np.int64)
        by_rank[rank] = np.arange(n)
        representative_row = by_rank[best][inverse]
    grouped = counts[inverse] > 1
    group_labels = np.flatnonzero(counts > 1)
    head = np.empty(len(counts), np.int64)
    head[inverse] = representative_row
    # Number groups by size descending, then by their representative's rank.
    by_size = np.lexsort((rank[head[group_labels]], -counts[group_labels]))
    number = np.full(len(counts), -1, np.int64)
    number[group_labels[by_size]] = np.arange(len(group_labels))
    group = number[inverse]
    representative = grouped & (representative_row == np.arange(n))
    removed = grouped & ~representative
    matched = np.where(removed, representative_row, -1)
    matched_score = np.full(n, np.nan, np.float32)
    rows = np.flatnonzero(removed)
    matched_score[rows] = lookup_scores(pairs, n, rows, matched[rows])
    reason = np.zeros(n, np.int8)
    near = matched_score[rows] >= np.float32(threshold if radius is None else radius)
    reason[rows] = np.where(near, NEAR_REPRESENTATIVE, THROUGH_MEMBERS)
    return Grouping(
        method=method,
        threshold=threshold,
        group=group,
        representative=representative,
        sizes=counts[group_labels[by_size]].astype(np.int64),
        matched=matched,
        matched_score=matched_score,
        reason=reason,
        pairs_used=int(np.sum(pairs.scores >= np.float32(threshold))),
    )


def dense_labels(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(labels, return_inverse=True, return_counts=True)[1:]``: each row's place
    among the distinct labels (ascending) and each label's count.

    Labels of rows (components, representatives) are small non-negative integers, so the
    counts are one ``bincount`` and the places its running sum, with no sort.
    """
    labels = np.asarray(labels)
    if len(labels) and labels.min() >= 0 and labels.max() < 4 * len(labels) + 16:
        every = np.bincount(labels)
        present = every > 0
        place = np.cumsum(present) - 1
        return place[labels], every[present].astype(np.int64)
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    return inverse.reshape(-1), counts
