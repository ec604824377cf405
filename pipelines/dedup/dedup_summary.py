"""What a dedup run reports: the summary line, the sweep tables of every method (Beam-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sbert_pipeline.dedup.corpus import REJECTED_FILE
from sbert_pipeline.dedup.decisions import changes_line
from sbert_pipeline.dedup.groups import SweepPoint
from sbert_pipeline.dedup.known import Found
from sbert_pipeline.dedup.labels import LabelPoint
from sbert_pipeline.dedup.sweep import NOT_COMPARED, MethodSweep


@dataclass(frozen=True)
class DedupSummary:
    """What a finished (or dry) dedup run reports.

    ``sweep`` is the chosen method's sweep (for ``components`` the union-find counts);
    ``sweeps`` holds every method's, the chosen one first.
    """

    output: str | None
    dry_run: bool
    threshold: float
    keep: str
    rows_in: int
    kept: int
    removed: int
    groups: int
    largest: int
    sweep: list[SweepPoint]
    limited: list[bool]  # per sweep point: pairs may be missing (top-k lists)
    notes: list[str]
    seconds: float
    corpus: dict | None = field(default=None)
    method: str = "components"
    radius: float | None = None  # star, split: the radius at the threshold
    sweeps: list[MethodSweep] = field(default_factory=list)
    target_precision: float | None = None
    # Rows that copy another row's normalised text (--exact-dedup embeddings), all removed;
    # None: the embeddings name no copies.
    copies: int | None = None
    # Known duplicate pairs (duplicate_of, or the labelled duplicates) the groups found; None:
    # there are none (pipelines/dedup/known.py).
    known: Found | None = None
    # What changed since the version in the output folder (pipelines/dedup/previous.py).
    changes: dict | None = None
    # Whether the previous version's kept rows were kept again, and why (None: no version).
    stable: str | None = None
    # --against: the manifest's ``against`` section (pipelines/dedup/against.py).
    against: dict | None = None

    @property
    def chosen(self) -> MethodSweep | None:
        """The chosen method's sweep with its labels (None when no sweep was run)."""
        return self.sweeps[0] if self.sweeps else None

    def at_threshold(self) -> LabelPoint | None:
        """The chosen method's P/R/F1 at the threshold (None without labels)."""
        chosen = self.chosen
        if chosen is None or not chosen.labels:
            return None
        return next(p for p in chosen.labels if p.threshold == self.threshold)

    def how(self) -> str:
        """The method in words: ``keep first`` for components, else method, keep, radius."""
        if self.method == "components":
            return f"keep {self.keep}"
        radius = f", radius {self.radius:g}" if self.radius is not None else ""
        return f"method {self.method}, keep {self.keep}{radius}"

    def line(self) -> str:
        """One-line human summary."""
        labels = self._labels_line()
        if self.known is not None:
            labels += (
                f"; known duplicates: {self.known.found} of {self.known.known} pairs in one "
                f"group (recall {self.known.recall:.3f})"
            )
        if self.dry_run:
            return (
                f"dry run: at threshold {self.threshold:g}, {self.removed} of {self.rows_in} rows "
                f"would be removed ({self.groups} groups, largest {self.largest}); nothing "
                f"written{labels}"
            )
        corpus = ""
        if self.corpus is not None:
            corpus = (
                f"; corpus: wrote {self.corpus['written']} of {self.corpus['rows_read']} rows "
                f"({self.corpus['not_embedded']} not embedded, see {REJECTED_FILE})"
            )
        copies = f" ({self.copies} copies of a normalised text)" if self.copies else ""
        against = (
            f" ({self.against['corpus_rows_matched']} match one of {self.against['rows']} "
            "reference rows)"
            if self.against is not None
            else ""
        )
        since = changes_line(self.changes, self.stable)
        return (
            f"deduplicated {self.rows_in} rows at threshold {self.threshold:g} ({self.how()}): "
            f"{self.groups} groups (largest {self.largest}), kept {self.kept}, removed "
            f"{self.removed}{against}{copies}{corpus}{labels}{since} in "
            f"{self.seconds:.1f}s -> {self.output}"
        )

    def _labels_line(self) -> str:
        point = self.at_threshold()
        if point is None or self.chosen is None:
            return ""
        best = self.chosen.best()
        text = (
            f"; labels: P {point.precision:.3f} R {point.recall:.3f} F1 {point.f1:.3f}, best F1 "
            f"{best.f1:.3f} at {best.threshold:g}"
        )
        if self.target_precision is not None:
            reached = self.chosen.at_precision(self.target_precision)
            text += (
                f", precision >= {self.target_precision:g} at {reached.threshold:g}"
                if reached is not None
                else f", precision {self.target_precision:g} reached at no threshold"
            )
        return text

    def sweep_lines(self) -> list[str]:
        """The chosen method's sweep as a text table, the threshold marked with ``<``; then,
        after a blank line, every method's removed rows and largest group (and F1 with
        labels) per threshold."""
        lines = [f"{'threshold':>9} {'pairs':>10} {'groups':>8} {'removed':>8} {'kept':>9} largest"]
        for point, limited in zip(self.sweep, self.limited, strict=True):
            mark = " <" if point.threshold == self.threshold else ""
            flag = " (top-k pairs only: a lower bound)" if limited else ""
            lines.append(
                f"{point.threshold:>9g} {point.pairs:>10} {point.groups:>8} {point.removed:>8} "
                f"{point.kept:>9} {point.largest:>7}{mark}{flag}"
            )
        if self.sweeps:
            lines += ["", *methods_lines(self.sweeps, self.threshold)]
        return lines


def methods_lines(sweeps: list[MethodSweep], threshold: float) -> list[str]:
    """Every method per threshold: ``removed/largest``, and ``F1`` when labelled."""
    labelled = bool(sweeps[0].labels)
    what = "removed/largest F1" if labelled else "removed/largest"
    lines = [f"every method ({what}; the chosen one first):"]
    if len(sweeps) == 1:
        lines = [f"{sweeps[0].method} ({what}); {NOT_COMPARED}:"]
    lines.append(f"{'threshold':>9} " + " ".join(f"{s.method:>18}" for s in sweeps))
    for i, point in enumerate(sweeps[0].points):
        cells = []
        for sweep in sweeps:
            other = sweep.points[i]
            cell = f"{other.removed}/{other.largest}"
            if sweep.labels:
                cell += f" {sweep.labels[i].f1:.3f}"
            cells.append(f"{cell:>18}")
        mark = " <" if point.threshold == threshold else ""
        lines.append(f"{point.threshold:>9g} " + " ".join(cells) + mark)
    if labelled:
        for sweep in sweeps:
            best = sweep.best()
            lines.append(
                f"{sweep.method}: best F1 {best.f1:.3f} at {best.threshold:g} (P "
                f"{best.precision:.3f}, R {best.recall:.3f}, largest group {best.largest})"
            )
    return lines
