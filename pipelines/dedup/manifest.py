"""The ``_manifest.json`` of a finished dedup run (docs/architecture.md, ``dedup/``)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
from sbert_pipeline.dedup.corpus import CORPUS_DIR, REJECTED_FILE
from sbert_pipeline.dedup.dedup_summary import DedupSummary
from sbert_pipeline.dedup.grouping import Grouping
from sbert_pipeline.dedup.groups import Histogram
from sbert_pipeline.dedup.labels import LabelledPairs
from sbert_pipeline.dedup.load import PairSource
from sbert_pipeline.dedup.options import Options
from sbert_pipeline.dedup.order import corpus_spec
from sbert_pipeline.dedup.outputs import (
    GROUPS_FILE,
    ID_LIST_ENCODING,
    KEPT_FILE,
    REMOVED_FILE,
    REPORT_FILE,
)
from sbert_pipeline.dedup.report_methods import KnownView
from sbert_pipeline.dedup.sweep import NOT_COMPARED, MethodSettings, MethodSweep
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.manifest_fields import created_now, model_fields, software_versions


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
    corpus = None
    if options.corpus is not None:
        spec = corpus_spec(datasets, options.format, options.text_field, options.id_field)
        corpus = {"pattern": options.corpus, "spec": asdict(spec), "applied": options.apply}
        if summary.corpus is not None:
            corpus.update(directory=CORPUS_DIR, rejected_file=REJECTED_FILE, **summary.corpus)
    limited = summary.limited
    grouped = int(np.sum(groups.group[: summary.rows_in] >= 0))
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
        "counts": {
            "rows_in": summary.rows_in,
            "kept": summary.kept,
            "removed": summary.removed,
            "groups": groups.n_groups,
            # Corpus rows; a group's --against reference rows count in its size only.
            "grouped": grouped,
            "singletons": summary.rows_in - grouped,
            "largest_group": groups.largest,
        },
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
            "label": options.label_column,
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
