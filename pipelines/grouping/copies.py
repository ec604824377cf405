"""Copies of one normalised text (exact-copy embeddings) in the groups (Beam-free).

An embed run with exact copies embeds each distinct normalised text once and writes every
other row holding it (a *copy*) with its representative's vector and the representative's id in
the ``copy_of`` column. Here every copy joins its
representative's group, whatever the method and the threshold:

1. the methods group the other rows only: every pair with a copy at one end is dropped first
   (:meth:`TextCopies.distinct`), since a copy's pairs repeat its representative's exactly and
   would only let rankings (``central``), nearest-neighbour lists (``mutual``) and linkage means
   count one text several times;
2. then every copy joins its representative's group (:meth:`TextCopies.join`), or forms one
   with it when the representative is in no group. A copy is always removed, never kept; its
   reason is "same normalised text" and its score is 1.0 when its representative is the
   group's kept member. When the representative was itself removed, the copy's score with the
   kept member is the representative's (the two rows hold one vector).

Groups are then numbered by size descending, then by their kept member's rank (the order rank:
corpus order, or id order). Without copies every function returns its input unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.grouping.model import REASONS, SAME_TEXT, Grouping
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.sweep import SweepPoint


@dataclass(frozen=True)
class TextCopies:
    """Which rows copy another row's normalised text.

    Attributes:
        copy_of: ``(n,)`` int64, the representative row of a copy, -1 for every other row.
    """

    copy_of: np.ndarray

    @classmethod
    def none(cls, n: int) -> TextCopies:
        """No copies among ``n`` rows."""
        return cls(np.full(n, -1, np.int64))

    def __post_init__(self) -> None:
        copy_of = self.copy_of
        copies = np.flatnonzero(copy_of >= 0)
        if len(copies) and (copy_of.max() >= len(copy_of) or np.any(copy_of[copy_of[copies]] >= 0)):
            raise ValueError(
                "copy_of must name, for each copy, a row in range that is not itself a copy"
            )

    @property
    def is_copy(self) -> np.ndarray:
        """``(n,)`` bool."""
        return self.copy_of >= 0

    @property
    def n_copies(self) -> int:
        """Rows that are copies."""
        return int(np.count_nonzero(self.copy_of >= 0))

    @property
    def n_texts(self) -> int:
        """Distinct normalised texts that have copies."""
        return len(np.unique(self.copy_of[self.copy_of >= 0]))

    def grouped_rows(self) -> np.ndarray:
        """``(n,)`` bool: the copies and their representatives (in a group at any threshold)."""
        rows = self.is_copy.copy()
        rows[self.copy_of[self.is_copy]] = True
        return rows

    def to_json(self) -> dict:
        """For the dedup manifest."""
        return {
            "copies": self.n_copies,
            "texts": self.n_texts,
            "reason": REASONS[SAME_TEXT],
        }

    def distinct(self, pairs: IndexedPairs) -> IndexedPairs:
        """The pairs with no copy at either end (what the methods group)."""
        if not self.n_copies:
            return pairs
        keep = ~(self.is_copy[pairs.a] | self.is_copy[pairs.b])
        return IndexedPairs(pairs.a[keep], pairs.b[keep], pairs.scores[keep])

    def with_copy_edges(self, pairs: IndexedPairs) -> IndexedPairs:
        """:meth:`distinct` pairs plus one pair (copy, representative) at 1.0 per copy: their
        connected components at any threshold are the components with the copies joined."""
        distinct = self.distinct(pairs)
        if not self.n_copies:
            return distinct
        copies = np.flatnonzero(self.is_copy)
        heads = self.copy_of[copies]
        return IndexedPairs(
            np.concatenate([distinct.a, np.minimum(copies, heads)]),
            np.concatenate([distinct.b, np.maximum(copies, heads)]),
            np.concatenate([distinct.scores, np.ones(len(copies), np.float32)]),
        )

    def counted(self, points: list[SweepPoint]) -> list[SweepPoint]:
        """Sweep points counted over :meth:`with_copy_edges`, with the copy edges taken out of
        the pair counts (they are not pairs of the pairs stage)."""
        return [dataclasses.replace(p, pairs=p.pairs - self.n_copies) for p in points]

    def join(self, grouping: Grouping, rank: np.ndarray) -> Grouping:
        """``grouping`` (of the :meth:`distinct` pairs) with every copy in its representative's
        group (module docstring)."""
        if not self.n_copies:
            return grouping
        group, representative, sizes, kept_row = self._joined(
            grouping.group, grouping.representative, rank
        )
        copies = np.flatnonzero(self.is_copy)
        matched = grouping.matched.copy()
        matched[copies] = kept_row[copies]
        matched_score = grouping.matched_score.copy()
        matched_score[copies] = self._copy_scores(copies, kept_row, grouping.matched_score)
        reason = grouping.reason.copy()
        reason[copies] = SAME_TEXT
        return dataclasses.replace(
            grouping,
            group=group,
            representative=representative,
            sizes=sizes,
            matched=matched,
            matched_score=matched_score,
            reason=reason,
        )

    def _joined(
        self, group: np.ndarray, representative: np.ndarray, rank: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(group, representative, sizes, kept row of every grouped row) with the copies in."""
        n = len(group)
        heads = self.copy_of[self.is_copy]
        if np.any(group[self.is_copy] >= 0):
            raise ValueError("copies must be in no group before they are joined (distinct pairs)")
        # A representative in no group starts one: label G + its row.
        label = np.where(group >= 0, group, len(group) + np.arange(n))
        label[self.is_copy] = label[heads]
        kept = representative.copy()
        alone = np.unique(heads[group[heads] < 0])
        kept[alone] = True
        _, inverse, counts = np.unique(label, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        in_group = counts[inverse] > 1
        head_of = np.empty(len(counts), np.int64)
        head_of[inverse[kept]] = np.flatnonzero(kept)
        labels = np.flatnonzero(counts > 1)
        order = np.lexsort((rank[head_of[labels]], -counts[labels]))
        number = np.full(len(counts), -1, np.int64)
        number[labels[order]] = np.arange(len(labels))
        kept_row = np.where(in_group, head_of[inverse], -1)
        return (
            number[inverse],
            kept & in_group,
            counts[labels[order]].astype(np.int64),
            kept_row,
        )

    def _copy_scores(
        self, copies: np.ndarray, kept_row: np.ndarray, scores: np.ndarray
    ) -> np.ndarray:
        """A copy's score with its group's kept member: 1.0 when that is its representative,
        else its representative's own (the same vector)."""
        heads = self.copy_of[copies]
        return np.where(kept_row[copies] == heads, np.float32(1.0), scores[heads]).astype(
            np.float32
        )
