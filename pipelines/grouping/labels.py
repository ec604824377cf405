"""Groupings measured on labelled pairs: pair precision, recall and F1, calibration (Beam-free).

A labelled pair ``(x, y, label)`` says whether two items are duplicates. A grouping predicts
"duplicate" for the pair when both items end in the same group (a removed item belongs to its
representative's group; an item in no group is alone). On the labelled pairs only:

* ``precision = TP / (TP + FP)``, ``recall = TP / (TP + FN)``, ``F1 = 2 P R / (P + R)``, with
  0 where a denominator is 0 (no predicted or no labelled duplicates).

Labels are partial: pairs nobody labelled do not count either way, so these numbers say how a
method agrees with the labels, not how many unlabelled duplicates it finds.

A sweep evaluates one method at many thresholds (:func:`label_sweep`); :func:`best_f1_point` picks
the F1-maximising point (its threshold and counts; not
:func:`sbert_core.evaluation.pair_metrics.best_f1`, the best cut of raw scores) and
:func:`for_precision` the threshold with the highest recall whose precision reaches a target.
:func:`pr_curve` gives the precision-recall points for a report.

Example:
    >>> labelled = match_labels(RawLabels(path, id_a, id_b, label), ids)
    >>> points = label_sweep("components", groupings, labelled)
    >>> best_f1_point(points).threshold
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.grouping.model import Grouping


@dataclass(frozen=True)
class RawLabels:
    """Labelled pairs as read: two id columns (strings) and a bool label per row."""

    path: str
    id_a: list[str]
    id_b: list[str]
    label: np.ndarray  # (R,) bool


@dataclass(frozen=True)
class LabelledPairs:
    """Labelled pairs as item rows, and what could not be used.

    ``read == len(a) + unknown + same_item``: every labelled row is either evaluated or
    counted as left out.
    """

    a: np.ndarray  # (L,) int64 item row
    b: np.ndarray  # (L,) int64 item row
    label: np.ndarray  # (L,) bool
    read: int  # labelled rows read
    unknown: int  # rows naming an id that is not among the items (left out)
    same_item: int  # rows pairing an item with itself (left out)

    @property
    def positives(self) -> int:
        """Labelled duplicates evaluated."""
        return int(self.label.sum())

    def to_json(self) -> dict:
        """For the manifest."""
        return {
            "read": self.read,
            "evaluated": len(self.a),
            "duplicates": self.positives,
            "unknown_ids": self.unknown,
            "same_item": self.same_item,
        }


def match_labels(raw: RawLabels, ids: pa.Array | Sequence[str]) -> LabelledPairs:
    """Map labelled pairs to item rows; pairs naming an unknown id are counted and left out.

    Args:
        raw: the pairs as read (ids as strings).
        ids: every item's id, unique; row ``i`` is item ``i``.
    """
    ids = ids if isinstance(ids, pa.Array) else pa.array(list(ids), pa.string())
    if ids.type != pa.string():
        ids = ids.cast(pa.string())
    rows = []
    for column in (raw.id_a, raw.id_b):
        found = pc.index_in(pa.array(column, pa.string()), value_set=ids)
        rows.append(found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64))
    a, b = rows
    known = (a >= 0) & (b >= 0)
    distinct = known & (a != b)
    return LabelledPairs(
        a=a[distinct],
        b=b[distinct],
        label=raw.label[distinct],
        read=len(raw.label),
        unknown=int(np.sum(~known)),
        same_item=int(np.sum(known & (a == b))),
    )


@dataclass(frozen=True)
class PairCounts:
    """Confusion counts of "same group" on labelled pairs, and the scores they give."""

    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def precision(self) -> float:
        """``TP / (TP + FP)``, 0 when nothing is predicted duplicate."""
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        """``TP / (TP + FN)``, 0 when no pair is labelled duplicate."""
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        """Harmonic mean of precision and recall, 0 when both are 0."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def pair_counts(labels: np.ndarray, labelled: LabelledPairs) -> PairCounts:
    """Counts for a partition ``labels`` (``(n,)``, equal value = same group) on labelled pairs.

    Use :meth:`sbert_pipeline.grouping.model.Grouping.labels` for a grouping's partition.
    """
    same = labels[labelled.a] == labels[labelled.b]
    duplicate = labelled.label
    return PairCounts(
        tp=int(np.sum(same & duplicate)),
        fp=int(np.sum(same & ~duplicate)),
        fn=int(np.sum(~same & duplicate)),
        tn=int(np.sum(~same & ~duplicate)),
    )


@dataclass(frozen=True)
class LabelPoint:
    """One method at one threshold: agreement with the labels and what it would remove."""

    method: str
    threshold: float
    counts: PairCounts
    groups: int
    largest: int
    removed: int

    @property
    def precision(self) -> float:
        """Pair precision."""
        return self.counts.precision

    @property
    def recall(self) -> float:
        """Pair recall."""
        return self.counts.recall

    @property
    def f1(self) -> float:
        """Pair F1."""
        return self.counts.f1

    def to_json(self) -> dict:
        """For the manifest and the benchmark."""
        return {
            "method": self.method,
            "threshold": self.threshold,
            "precision": round(self.precision, 6),
            "recall": round(self.recall, 6),
            "f1": round(self.f1, 6),
            "tp": self.counts.tp,
            "fp": self.counts.fp,
            "fn": self.counts.fn,
            "groups": self.groups,
            "largest": self.largest,
            "removed": self.removed,
        }


def score_grouping(grouping: Grouping, labelled: LabelledPairs) -> LabelPoint:
    """One grouping on the labelled pairs."""
    return LabelPoint(
        method=grouping.method,
        threshold=grouping.threshold,
        counts=pair_counts(grouping.labels(), labelled),
        groups=grouping.n_groups,
        largest=grouping.largest,
        removed=grouping.n_removed,
    )


def label_sweep(groupings: Iterable[Grouping], labelled: LabelledPairs) -> list[LabelPoint]:
    """Evaluate a method's groupings (e.g. one per threshold) on the labelled pairs.

    Raises:
        ValueError: the labels hold no duplicate pair (recall and F1 are undefined).
    """
    if not labelled.positives:
        raise ValueError(
            f"none of the {len(labelled.a)} usable labelled pairs is a duplicate; "
            "recall and F1 are undefined"
        )
    return [score_grouping(grouping, labelled) for grouping in groupings]


def best_f1_point(points: Sequence[LabelPoint]) -> LabelPoint:
    """The point with the highest F1; of equal F1 the higher threshold (it removes less).

    Raises:
        ValueError: no points.
    """
    if not points:
        raise ValueError("no sweep points to choose from")
    return max(points, key=lambda point: (point.f1, point.threshold))


def for_precision(points: Sequence[LabelPoint], target: float) -> LabelPoint | None:
    """The point of highest recall whose precision is ``>= target`` (ties: higher threshold);
    None when no threshold reaches the target.

    Raises:
        ValueError: ``target`` outside ``[0, 1]``.
    """
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target precision must lie in [0, 1], got {target}")
    reached = [point for point in points if point.counts.tp and point.precision >= target]
    if not reached:
        return None
    return max(reached, key=lambda point: (point.recall, point.threshold))


def pr_curve(points: Sequence[LabelPoint]) -> dict[str, list[float]]:
    """Precision-recall points of one method's sweep, by threshold ascending (for a report)."""
    ordered = sorted(points, key=lambda point: point.threshold)
    return {
        "threshold": [point.threshold for point in ordered],
        "precision": [round(point.precision, 6) for point in ordered],
        "recall": [round(point.recall, 6) for point in ordered],
    }
