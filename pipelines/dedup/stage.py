"""The dedup stage: duplicate groups from the similar pairs of ``sbert pairs``, one row kept each.

A run is four phases over small frozen records (docs/architecture.md, "Dedup in four phases"):

1. :func:`~sbert_pipeline.dedup.inputs.read_inputs`: every input read and checked once (pairs,
   ids, copies, labels, known duplicates, reference, previous version, corpus scan);
2. :func:`group`: every method through the grouping library's one dispatch table, over the
   threshold sweep and at the threshold;
3. :func:`~sbert_pipeline.dedup.decide.decide`: the keep policy's groups with the stable-keep
   and reference pins applied, the stable group ids and what changed;
4. :func:`~sbert_pipeline.dedup.write.write`: ``groups.parquet``, the id lists, the corpus,
   ``report.html`` and the manifest (nothing for a dry run).
"""

from __future__ import annotations

import time

from sbert_pipeline.dedup.decide import Grouped, decide
from sbert_pipeline.dedup.inputs import DedupInputs, read_inputs
from sbert_pipeline.dedup.options import Options
from sbert_pipeline.dedup.write import LAYOUT, DedupResult, write
from sbert_pipeline.grouping.choices import METHODS, RADIUS_METHODS, holds_threshold
from sbert_pipeline.grouping.compare import Ranker, sweep_methods
from sbert_pipeline.grouping.methods import group_items
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.stage_api.beam_run import show_progress

__all__ = ["LAYOUT", "DedupResult", "run"]


def run(options: Options, *, pipeline: object = None) -> DedupResult:
    """Group the duplicates, choose the kept rows, write the outputs (unless ``dry_run``).

    Dedup runs in this process (the grouping is sequential), so unlike the other stages it
    takes no Beam options and runs no pipeline: ``pipeline`` is accepted for the common stage
    signature and must be None.

    Raises:
        ValueError, FileNotFoundError, IncompatibleEmbeddingsError, OutputExistsError: bad
            options or inputs, found before anything is written.
        JobFailedError: the counts do not add up (rows in != kept + removed); no manifest.
    """
    if pipeline is not None:
        raise ValueError("dedup runs in this process: it takes no Beam pipeline")
    with content_checks(options.verify):
        show_progress()  # dedup runs in this process
        start = time.perf_counter()
        inputs = read_inputs(options)
        grouped = group(inputs)
        decided = decide(inputs, grouped)
        return write(inputs, grouped, decided, start)


def group(inputs: DedupInputs) -> Grouped:
    """Every method of the sweep at every threshold, and the chosen one at the threshold."""
    options, settings, corpus = inputs.options, inputs.settings, inputs.corpus
    n, pairs, threshold = inputs.n, inputs.source.pairs, options.threshold
    values = None if corpus.scan is None else corpus.scan.values
    ranker = Ranker(settings, n, pairs, corpus.rank, corpus.lengths, values)
    sweeps = sweep_methods(
        settings,
        pairs,
        inputs.source.thresholds,
        ranker,
        inputs.labelled,
        methods=METHODS if options.sweep == "all" else (options.method,),
        copies=inputs.copies,
        known=None if inputs.known is None else inputs.known.pairs,
    )
    groups = group_items(
        options.method,
        n,
        pairs,
        threshold,
        ranker(threshold),
        rep_threshold=settings.radius_at(threshold),
        k=settings.k,
        missing_score=settings.missing_score,
        order_rank=corpus.rank,
        max_group_size=settings.max_group_size,
    )
    radius = settings.radius_at(threshold) if options.method in RADIUS_METHODS else None
    tight = holds_threshold(options.method, radius, threshold)
    return Grouped(inputs.copies.join(groups, corpus.rank), sweeps, radius, tight)
