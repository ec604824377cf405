"""Every grouping method over the threshold sweep, with the chosen method's settings (Beam-free).

:class:`MethodSettings` holds what the methods need besides the pairs and the threshold: the
member kept, the star/split radius (kept as a gap below each threshold), mutual's ``k`` and
average linkage's score for pairs not given. :func:`sweep_methods` runs the chosen method or
every method at every threshold and, with labelled pairs, scores each point
(:mod:`sbert_pipeline.grouping.labels`).

``components`` is counted by :func:`sbert_pipeline.grouping.sweep.threshold_sweep` (one union-find
pass), exactly as before the other methods existed; the others group at each threshold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.grouping.choices import (
    DEFAULT_KEEP,
    DEFAULT_MAX_GROUP_SIZE,
    DEFAULT_METHOD,
    DEFAULT_MUTUAL_K,
    DEFAULT_RADIUS_GAP,
    METHODS,
)
from sbert_pipeline.grouping.copies import TextCopies
from sbert_pipeline.grouping.labels import (
    LabelledPairs,
    LabelPoint,
    best_f1_point,
    for_precision,
    score_grouping,
)
from sbert_pipeline.grouping.methods import group_items, sweep_groupings
from sbert_pipeline.grouping.model import Grouping
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.ranking import rank_items
from sbert_pipeline.grouping.sweep import SweepPoint, threshold_sweep
from sbert_pipeline.vectors.progress import Progress, stage_progress


@dataclass(frozen=True)
class MethodSettings:
    """The chosen method and the parameters every method of the sweep is run with.

    Attributes:
        method: one of :data:`sbert_pipeline.grouping.choices.METHODS`.
        keep: the member every method keeps: ``first``, ``longest``, ``central``,
            ``random`` or ``column:NAME`` (the ranking of the same name).
        radius_gap: star, split: the radius at threshold ``t`` is ``t - radius_gap`` (0: the
            threshold, so every removed row is at or above it to its kept row).
        floor: the pairs' threshold (None: unknown); a radius never goes below it.
        k: mutual: neighbours per item.
        missing_score: average: the score of a pair that is not given.
        seed: the random ranking's seed.
        max_group_size: a group over this many members is split (None: no limit).
    """

    method: str = DEFAULT_METHOD
    keep: str = DEFAULT_KEEP
    radius_gap: float = DEFAULT_RADIUS_GAP
    floor: float | None = None
    k: int = DEFAULT_MUTUAL_K
    missing_score: float = 0.0
    seed: int = 0
    max_group_size: int | None = DEFAULT_MAX_GROUP_SIZE

    @property
    def column(self) -> str | None:
        """The corpus field of a ``column:NAME`` ranking, else None."""
        return self.keep.partition(":")[2] if self.keep.startswith("column:") else None

    def radius_at(self, threshold: float) -> float:
        """The star/split radius at ``threshold``: ``threshold - radius_gap``, not below the
        pairs' floor (pairs under it are not all known) and not above the threshold."""
        low = -1.0 if self.floor is None else self.floor
        return min(threshold, max(round(threshold - self.radius_gap, 6), low))


class Ranker:
    """The ranking of the items at a threshold (``central`` depends on it).

    Args:
        settings: the ranking and its seed.
        n: items.
        pairs: the loaded pairs.
        order_rank: the corpus (or id) order that breaks every tie.
        text_lengths: ``(n,)`` characters per item, -1 where unknown (``longest``).
        values: ``(n,)`` the ranking column, NaN where missing (``column:NAME``).
    """

    def __init__(
        self,
        settings: MethodSettings,
        n: int,
        pairs: IndexedPairs,
        order_rank: np.ndarray,
        text_lengths: np.ndarray | None = None,
        values: np.ndarray | None = None,
    ) -> None:
        self.policy = settings.keep.partition(":")[0]  # column:NAME ranks by the column
        self.settings, self.n, self.pairs = settings, n, pairs
        self.order_rank, self.text_lengths, self.values = order_rank, text_lengths, values

    def __call__(self, threshold: float) -> np.ndarray:
        """``(n,)`` ranks at ``threshold``.

        Raises:
            ValueError: the ranking needs a text length or value an item with a pair lacks.
        """
        return rank_items(
            self.policy,
            self.n,
            order_rank=self.order_rank,
            text_lengths=self.text_lengths,
            values=self.values,
            pairs=self.pairs,
            threshold=threshold,
            seed=self.settings.seed,
        )


def group_at(
    method: str, settings: MethodSettings, pairs: IndexedPairs, threshold: float, ranker: Ranker
) -> Grouping:
    """One method's groups at one threshold."""
    return group_items(
        method,
        ranker.n,
        pairs,
        threshold,
        ranker(threshold),
        rep_threshold=settings.radius_at(threshold),
        k=settings.k,
        missing_score=settings.missing_score,
        max_group_size=settings.max_group_size,
    )


@dataclass(frozen=True)
class MethodSweep:
    """One method at every sweep threshold: the counts, with labels P/R/F1, and with known
    duplicates their recall (``known``: the known duplicate pairs)."""

    method: str
    points: list[SweepPoint]
    labels: list[LabelPoint] | None
    known: list[LabelPoint] | None = None

    def best(self) -> LabelPoint | None:
        """The best-F1 point (None without labels)."""
        return best_f1_point(self.labels) if self.labels else None

    def at_precision(self, target: float | None) -> LabelPoint | None:
        """The highest-recall point with precision >= target (None: none, or no target)."""
        if target is None or not self.labels:
            return None
        return for_precision(self.labels, target)

    def to_json(self, limited: Sequence[bool], target: float | None) -> dict:
        """For the manifest: the points (with P/R/F1 when labelled) and the calibration."""
        points = []
        for i, point in enumerate(self.points):
            row = {**point.to_json(), "limited_by_k": limited[i]}
            if self.labels:
                label = self.labels[i].to_json()
                row.update({key: label[key] for key in ("precision", "recall", "f1")})
            points.append(row)
        out: dict = {"method": self.method, "points": points}
        if self.labels:
            best, reached = self.best(), self.at_precision(target)
            out["best_f1"] = best.to_json() if best else None
            if target is not None:
                out["target_precision"] = target
                out["at_target_precision"] = reached.to_json() if reached else None
        return out


def sweep_methods(
    settings: MethodSettings,
    pairs: IndexedPairs,
    thresholds: Sequence[float],
    ranker: Ranker,
    labelled: LabelledPairs | None = None,
    methods: Sequence[str] = METHODS,
    copies: TextCopies | None = None,
    known: LabelledPairs | None = None,
) -> list[MethodSweep]:
    """Every method of ``methods`` at every threshold (ascending), the chosen method first.

    The chosen method (``settings.method``) is always swept, listed in ``methods`` or not:
    dedup passes it alone or every method.
    One progress bar counts every (method, threshold) point, so its ETA is the whole sweep's.

    With ``known`` (known duplicate pairs, all labelled duplicates), every point also counts
    how many of them ended in one group (``MethodSweep.known``).

    With ``copies`` (of an exact-copy embed run), ``pairs`` are the distinct rows' and
    every grouping gets the copies joined (:mod:`sbert_pipeline.grouping.copies`).

    Raises:
        ValueError: the labels hold no duplicate pair, or a method's inputs are bad.
    """
    if labelled is not None and not labelled.positives:
        raise ValueError(
            f"none of the {len(labelled.a)} usable labelled pairs is a duplicate; recall and "
            "F1 are undefined"
        )
    ordered = [settings.method, *(m for m in methods if m != settings.method)]
    copies = copies if copies is not None else TextCopies.none(ranker.n)
    what = ordered[0] if len(ordered) == 1 else f"{len(ordered)} methods"
    bar = stage_progress(
        f"dedup sweep ({what})", total=len(thresholds) * len(ordered), unit="thresholds"
    )
    out = []
    with bar:
        for method in ordered:
            out.append(
                _sweep_one(
                    method, settings, pairs, thresholds, ranker, labelled, copies, known, bar
                )
            )
    return out


def _sweep_one(
    method: str,
    settings: MethodSettings,
    pairs: IndexedPairs,
    thresholds: Sequence[float],
    ranker: Ranker,
    labelled: LabelledPairs | None,
    copies: TextCopies,
    known: LabelledPairs | None,
    bar: Progress,
) -> MethodSweep:
    """One method of :func:`sweep_methods`, counted on its bar."""
    counted = None
    if method == "components":
        edges = copies.with_copy_edges(pairs)
        counted = copies.counted(threshold_sweep(ranker.n, edges, thresholds))
        limit = settings.max_group_size
        if limit is not None and any(point.largest > limit for point in counted):
            counted = None  # groups over the limit are split: count the split groupings
    points, labels, found = [], [], []
    if counted is None or labelled is not None or known is not None:
        groupings = sweep_groupings(
            method,
            ranker.n,
            pairs,
            thresholds,
            ranker,
            rep_threshold=settings.radius_at,
            k=settings.k,
            missing_score=settings.missing_score,
            progress=bar,
            max_group_size=settings.max_group_size,
        )
        # One grouping at a time: they hold several (n,) arrays each.
        for grouping in groupings:
            grouping = copies.join(grouping, ranker.order_rank)
            points.append(sweep_point(grouping))
            if labelled is not None:
                labels.append(score_grouping(grouping, labelled))
            if known is not None:
                found.append(score_grouping(grouping, known))
    else:
        bar.update(len(thresholds))  # one union-find pass answered every threshold
    return MethodSweep(
        method,
        counted or points,
        labels if labelled else None,
        found if known is not None else None,
    )


def sweep_point(grouping: Grouping) -> SweepPoint:
    """A grouping's counts as a sweep point."""
    grouped = int(grouping.sizes.sum())
    return SweepPoint(
        threshold=grouping.threshold,
        pairs=grouping.pairs_used,
        groups=grouping.n_groups,
        grouped=grouped,
        removed=grouping.n_removed,
        kept=grouping.n - grouping.n_removed,
        largest=grouping.largest,
    )
