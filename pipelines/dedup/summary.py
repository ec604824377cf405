"""What a dedup run reports besides ``report.html``: the summary line, the sweep tables of every
method, the similarity histogram and ``_manifest.json`` (Beam-free)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from sbert_pipeline.dedup.corpus import CORPUS_DIR, REJECTED_FILE
from sbert_pipeline.dedup.inputs import corpus_spec
from sbert_pipeline.dedup.known import Found, KnownView
from sbert_pipeline.dedup.options import Options
from sbert_pipeline.dedup.sources import PairSource
from sbert_pipeline.dedup.versions import (
    GROUPS_FILE,
    ID_LIST_ENCODING,
    KEPT_FILE,
    REMOVED_FILE,
    REPORT_FILE,
)
from sbert_pipeline.grouping.compare import MethodSettings, MethodSweep
from sbert_pipeline.grouping.labels import LabelledPairs, LabelPoint
from sbert_pipeline.grouping.model import Grouping
from sbert_pipeline.grouping.sizes import distribution_text, removed_share
from sbert_pipeline.grouping.sweep import SweepPoint
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.manifest_fields import created_now, model_fields, software_versions
from sbert_pipeline.vectors.checks import check_cosine

# Said by the report, the dry run's table and the manifest when only the chosen method was swept.
NOT_COMPARED = (
    "the comparison of every method was not run: only the chosen method was swept (--sweep "
    "chosen, the default); rerun with --sweep all (sweep: all in sbert run) to compare them"
)


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
    # What changed since the version in the output folder (pipelines/dedup/versions.py).
    changes: dict | None = None
    # Whether the previous version's kept rows were kept again, and why (None: no version).
    stable: str | None = None
    # --against: the manifest's ``against`` section (pipelines/dedup/against.py).
    against: dict | None = None
    # The guard's figures: groups per size bin (grouping/sizes.py), the group-size limit and
    # how many groups over it were split, whether the method holds the threshold (every
    # removed row >= T to its kept row) and how many removed rows are below it.
    group_sizes: dict[str, int] = field(default_factory=dict)
    max_group_size: int | None = None
    split_groups: int = 0
    holds_threshold: bool = True
    below_threshold: int = 0
    score_name: str = "cosine"  # what the threshold compares: cosine or verify score

    @property
    def removed_share(self) -> float:
        """The share of the rows removed."""
        return removed_share(self.removed, self.rows_in)

    def groups_text(self) -> str:
        """``"12 groups (largest 5; sizes 2: 9, 3-5: 3, ...)"``."""
        sizes = f"; sizes {distribution_text(self.group_sizes)}" if self.group_sizes else ""
        return f"{self.groups} groups (largest {self.largest}{sizes})"

    def guard_text(self) -> str:
        """What the summary line says of the group-size limit and of the threshold rule."""
        text = ""
        if self.split_groups:
            text += (
                f"; {self.split_groups} groups over --max-group-size {self.max_group_size} "
                "were split"
            )
        if not self.holds_threshold:
            text += (
                f"; {self.how()} may remove rows below the threshold to their kept row "
                f"({self.below_threshold} of {self.removed} removed rows are below "
                f"{self.threshold:g} or chained)"
            )
        return text

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
        """The method in words: method, keep and (star, split) radius."""
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
                f"({self.removed_share:.1%}) would be removed ({self.groups_text()})"
                f"{self.guard_text()}; nothing written{labels}"
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
            f"{self.groups_text()}, kept {self.kept}, removed {self.removed} "
            f"({self.removed_share:.1%}){against}{copies}{self.guard_text()}{corpus}{labels}"
            f"{since} in {self.seconds:.1f}s -> {self.output}"
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


def dedup_manifest(
    options: Options,
    settings: MethodSettings,
    pairs_output,
    datasets: list[EmbeddingsDataset],
    source: PairSource,
    groups: Grouping,
    summary: DedupSummary,
    histogram: Histogram,
    labelled: LabelledPairs | None,
    known: KnownView | None = None,
) -> dict:
    """The manifest (without the order and the texts, which the job adds).

    Args:
        options: the stage's options.
        settings: the method settings every method of the sweep ran with.
        pairs_output: the :class:`sbert_pipeline.io.pairs_output.PairsOutput` read (None: no
            ``--pairs``).
        datasets: the embeddings.
        source: the pairs loaded.
        groups: the chosen method's groups at the threshold.
        summary: the run's summary (with every method's sweep).
        histogram: the pair similarities.
        labelled: the labelled pairs, if any.
        known: the known duplicates at the threshold, if any (``known_duplicates``).
    """
    corpus = _corpus(options, datasets, summary)
    limited = summary.limited
    return {
        "kind": "dedup",
        **model_fields(datasets[0].manifest),
        "threshold": options.threshold,
        "threshold_compared_as": "float32",
        "method": summary.method,
        "keep": summary.keep,
        "settings": {
            "radius": summary.radius,
            "radius_gap": settings.radius_gap,
            "mutual_k": settings.k,
            "missing_score": settings.missing_score,
            "seed": settings.seed,
            "sweep_keep": settings.keep,  # the other methods of the sweep keep by this
        },
        "counts": _counts(summary, groups),
        # The guard's figures, at the top for readers of the manifest (the job report).
        "largest_group": groups.largest,
        "group_sizes": summary.group_sizes,
        "removed_share": summary.removed_share,
        "max_group_size": summary.max_group_size,
        "split_groups": summary.split_groups,
        "threshold_rule": threshold_rule(summary),
        "pairs": _pairs(options, pairs_output, source, groups),
        "pairs_manifest": None if pairs_output is None else pairs_output.manifest,
        "embeddings": [
            {"directory": d.directory, "model_id": d.manifest.get("model_id")} for d in datasets
        ],
        "sweep": [
            {**point.to_json(), "limited_by_k": flag}
            for point, flag in zip(summary.sweep, limited, strict=True)
        ],
        "methods": [sweep.to_json(limited, summary.target_precision) for sweep in summary.sweeps],
        # --sweep: chosen (the method alone) or all (every method, the comparison).
        "methods_swept": options.sweep,
        "methods_note": None if options.sweep == "all" else NOT_COMPARED,
        "labels": _labels(options, summary, labelled),
        "known_duplicates": known_duplicates_json(options.threshold, known, summary.sweeps),
        "histogram": histogram.to_json(),
        "files": {
            "groups": GROUPS_FILE,
            "kept_ids": KEPT_FILE,
            "removed_ids": REMOVED_FILE,
            "report": REPORT_FILE,
            "id_list_encoding": ID_LIST_ENCODING,
        },
        "corpus": corpus,
        "notes": summary.notes,
        "software": software_versions(),
        "seconds": round(summary.seconds, 3),
        "created": created_now(),
    }


def threshold_rule(summary: DedupSummary) -> dict:
    """The manifest's ``threshold_rule``: whether every removed row is at or above the
    threshold to its kept row, by which score, and how many removed rows are not."""
    note = (
        f"every removed row is at or above the threshold to its kept row ({summary.score_name})"
        if summary.holds_threshold
        else f"{summary.how()} may remove rows below the threshold to their kept row (chosen "
        "explicitly; the default star at its radius T does not)"
    )
    return {
        "holds": summary.holds_threshold,
        "score": summary.score_name,
        "removed_below_threshold": summary.below_threshold,
        "note": note,
    }


def _corpus(options: Options, datasets: list[EmbeddingsDataset], summary: DedupSummary):
    """The corpus read (None without ``--corpus``)."""
    if options.corpus is None:
        return None
    spec = corpus_spec(datasets, options.format, options.text_field, options.id_field)
    corpus = {"pattern": options.corpus, "spec": asdict(spec), "applied": options.apply}
    if summary.corpus is not None:
        corpus.update(directory=CORPUS_DIR, rejected_file=REJECTED_FILE, **summary.corpus)
    return corpus


def _counts(summary: DedupSummary, groups: Grouping) -> dict:
    """The manifest's ``counts``."""
    grouped = int(np.sum(groups.group[: summary.rows_in] >= 0))
    return {
        "rows_in": summary.rows_in,
        "kept": summary.kept,
        "removed": summary.removed,
        "groups": groups.n_groups,
        # Corpus rows; a group's --against reference rows count in its size only.
        "grouped": grouped,
        "singletons": summary.rows_in - grouped,
        "largest_group": groups.largest,
    }


def _pairs(options: Options, pairs_output, source: PairSource, groups: Grouping) -> dict | None:
    """The pairs read and used (None without ``--pairs``: ``--against`` only)."""
    if pairs_output is None:
        return None
    return {
        "directory": options.pairs,
        "source": source.origin,
        "used": groups.pairs_used,
        "loaded": len(source.pairs),
        "loaded_min_score": source.low,
        "pairs_threshold": pairs_output.threshold,
        "k": pairs_output.k,
        "method": pairs_output.manifest.get("method"),
        "recall_at_k": pairs_output.manifest.get("recall_at_k"),
        "limited_by_k": source.limited(options.threshold),
    }


def _labels(options: Options, summary: DedupSummary, labelled: LabelledPairs | None) -> dict | None:
    """The labelled pairs used and the chosen method's calibration (None without labels)."""
    if labelled is None or summary.chosen is None:
        return None
    chosen = summary.chosen
    best, point = chosen.best(), summary.at_threshold()
    reached = chosen.at_precision(summary.target_precision)
    return {
        "file": options.labels,
        "columns": {
            "id_a": options.label_id_a,
            "id_b": options.label_id_b,
            "label": options.label_field,
        },
        **labelled.to_json(),
        "method": chosen.method,
        "at_threshold": point.to_json() if point else None,
        "best_f1": best.to_json() if best else None,
        "target_precision": summary.target_precision,
        "at_target_precision": reached.to_json() if reached else None,
    }


def known_duplicates_json(
    threshold: float, known: KnownView | None, sweeps: list[MethodSweep]
) -> dict | None:
    """The known duplicate pairs, how many the chosen method found at the threshold (with the
    labelled-pairs precision when labelled), and every method's recall over the sweep (None
    without known duplicates)."""
    if known is None:
        return None
    return {
        **known.known.to_json(),
        "method": known.method,
        "threshold": threshold,
        "at_threshold": {**known.found.to_json(), "labelled_precision": known.precision},
        "methods": [
            {
                "method": sweep.method,
                "points": [
                    {"threshold": p.threshold, "found": p.counts.tp, "recall": round(p.recall, 6)}
                    for p in sweep.known
                ],
            }
            for sweep in sweeps
            if sweep.known
        ],
    }


def changes_line(changes: dict | None, stable: str | None = None) -> str:
    """The summary line's part on the previous version ("" without one): ``stable``, whether
    its kept rows were kept again and why, then what changed."""
    if changes is None:
        return ""
    groups, rows = changes["groups"], changes["rows"]
    return (
        ("" if stable is None else f"; {stable}")
        + f"; since the last run: {groups['new']} new groups, {groups['grown']} grown, "
        f"{rows['newly_removed']} rows newly removed ({rows['previously_kept_removed']} of "
        "them kept before)"
    )


@dataclass(frozen=True)
class Histogram:
    """Counts of pair scores in equal-width bins: bin ``i`` is ``[edges[i], edges[i + 1])``,
    the last bin also holds scores at or above its upper edge (float32 rounding can give
    cosines a hair above 1)."""

    edges: np.ndarray  # (B + 1,) float64
    counts: np.ndarray  # (B,) int64

    def to_json(self) -> dict:
        """For the manifest."""
        return {"edges": [round(e, 6) for e in self.edges.tolist()], "counts": self.counts.tolist()}


def similarity_histogram(scores: np.ndarray, low: float, width: float = 0.01) -> Histogram:
    """Histogram of ``scores`` from ``low`` (rounded down to a multiple of ``width``) to 1.

    A score falls in the bin whose lower edge it reaches in float32, as thresholds compare, so
    the pairs counted from the bin at ``T`` upwards are exactly the pairs used at ``T``.

    Raises:
        ValueError: ``width <= 0``, ``low`` outside [-1, 1), or a score below ``low``.
    """
    if width <= 0:
        raise ValueError(f"histogram bin width must be positive, got {width}")
    check_cosine(low, "histogram low end", upper_open=True)
    scores = np.asarray(scores, np.float32)
    first = math.floor(round(low / width, 6))
    n_bins = max(1, math.ceil(round(1.0 / width, 6)) - first)
    edges = np.round((first + np.arange(n_bins + 1)) * width, 6)
    if len(scores) and scores.min() < np.float32(edges[0]):
        raise ValueError(f"a score ({scores.min()}) is below the histogram's low end {low}")
    bins = np.searchsorted(edges.astype(np.float32), scores, side="right") - 1
    bins = np.clip(bins, 0, n_bins - 1)
    return Histogram(edges, np.bincount(bins, minlength=n_bins).astype(np.int64))
