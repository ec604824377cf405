"""The pairs stage: every item's k most similar items, and every similar pair, from embeddings.

Run from Python as ``pairs.run(pairs.Options(embeddings=[...], output=...))``,
or with the command ``sbert pairs`` (its ``--help`` lists the options).

exact: every vector against every vector (``sbert_pipeline.vectors.allpairs``: float32 inner
products summed in float64 and rounded to float32, so the answer is brute force's ``X @ X.T`` to
within 1e-6). When one worker can hold every row's candidate lists (``sbert_pipeline.pairs.plan.
whole_matrix_bytes`` within ``--worker-memory``), one search covers the upper triangle of the score
matrix once, in one Beam step, or in the launcher on a local runner, reusing the vectors its
check read (without Beam options the runner is the local one, and such a run never imports Beam:
its files go through ``sbert_pipeline.io.filesystems``); else query rows are cut into ranges
searched by Beam workers, each holding all vectors, ``n * d * 4`` bytes (twice that while
loading), and the stage refuses exact mode when that does not fit ``--worker-memory``. Either
way the output has one shard per ``--ranges`` range, with the same lists and pairs (the
manifest's ``exact.path`` says which ran).

clustered (SemDeDup-style): spherical k-means with ``C`` centroids (default ``2 sqrt(N)``) is
fitted on a sample, every vector joins the blocks of its ``P`` nearest centroids, each block is
searched exactly, and an item's candidate lists from its blocks are merged (the pipeline is
described in ``pipelines/pairs/transforms.py``). Without ``--nprobe``, ``P`` is the smallest value
whose recall@k, predicted exactly on ``--tune-sample`` queries, reaches ``--target-recall``
(default 0.95; it stops where the blocks would cost a quarter of the exact search). Clusters
whose block would exceed ``--max-block`` vectors are split. The recall@k of the result against
exact search is then measured on ``--recall-sample`` random queries (other than the tuning ones
when N allows) and written to the manifest.

auto: exact up to 200,000 vectors (when it fits the worker memory), clustered above.

memory and disk: ``--memory-budget`` (default ``auto``) holds the whole process; what the run
needs is worked out from the manifests' sizes before any vector is read and refused when over
(:mod:`sbert_pipeline.pairs.memory`); on a local runner it also bounds a clustered worker's group of
blocks. The clustered search's temporary disk (each vector once, plus row lists and candidate
lists, :func:`sbert_pipeline.pairs.plan.clustered_disk_bytes`) is checked against the free space of
the output's disk before it is written. The manifest's ``memory_budget`` records the budget,
the need counted and the peak RSS measured.

incremental (``--incremental``): when the output folder holds this stage's previous output,
computed with the same settings and model from earlier versions of the same embeddings folders,
only the rows of new or changed embeddings parts are searched (against all rows), in the
launcher, and the rest is reused (:mod:`sbert_pipeline.pairs.incremental`): exactly the from-scratch
result in exact mode (:mod:`sbert_pipeline.pairs.exact_incremental`), the blocked search with the
stored centroids in clustered mode (:mod:`sbert_pipeline.pairs.clustered_incremental`). Otherwise
the run is a full one; the manifest's ``incremental`` section says which and why.

Output (docs/architecture.md ``pairs/``): ``neighbors/`` Parquet (``id``, ``neighbor_ids``,
``scores``: top-k per item, most similar first, equal scores by id), ``pairs/`` Parquet
(``id_a < id_b``, ``score >= T``, each pair once; without ``--threshold`` it holds one empty
shard with the schema), ``centroids.npy`` (clustered), and ``_manifest.json``, written last and
only on success. With ``--threshold``, exact mode writes every pair at or above T however many
there are (not only those in the top-k lists); clustered mode writes every such pair that shares
a block. Vectors are L2-normalised first unless the embeddings are unit float32 rows already, so
scores are cosine similarities. Ids must be unique; ``N = 1`` is refused (no other item), an
empty input gives empty outputs and a manifest.
"""

from __future__ import annotations

import importlib
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sbert_pipeline.io.atomic import write_table
from sbert_pipeline.io.centroids import CENTROIDS
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.embeddings import all_shards, count_rows, shard_paths
from sbert_pipeline.io.external_vectors import ExternalColumns, open_inputs, refuse_remote_workers
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import OutputLayout, join
from sbert_pipeline.io.pairs_output import NEIGHBORS, PAIRS
from sbert_pipeline.io.previous_output import full_run
from sbert_pipeline.io.resources import peak_rss
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from sbert_pipeline.pairs.incremental import Reuse, plan_reuse, replace_kind
from sbert_pipeline.pairs.known_pairs import known_pairs_recall
from sbert_pipeline.pairs.memory import MemoryPlan, check_memory
from sbert_pipeline.pairs.options import Options
from sbert_pipeline.pairs.output_tables import part_path
from sbert_pipeline.pairs.plan import (
    Blocking,
    BlockingRequest,
    choose_method,
    exact_path,
    exact_worker_bytes,
    plan_blocking,
)
from sbert_pipeline.pairs.run_record import PairsSummary, pairs_manifest
from sbert_pipeline.pairs.vector_reader import Scan, VectorReader, needs_normalizing
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.stage_output import stage_output
from sbert_pipeline.stage_api.stops import JobFailedError
from sbert_pipeline.vectors.progress import show_progress_unless_quiet

if TYPE_CHECKING:
    import apache_beam as beam
    import numpy as np
    from apache_beam.options.pipeline_options import PipelineOptions
    from sbert_pipeline.pairs.exact import RunTransform

# What a pairs run writes (see docs/architecture.md, folder contracts).
LAYOUT = OutputLayout(datasets=(NEIGHBORS, PAIRS), files=(CENTROIDS,))


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Search the embeddings and write the outputs; returns once the manifest is published.

    Args:
        options: the stage's options (checked when they were built).
        pipeline: a pipeline to build the search into (tests pass a ``TestPipeline``).

    Raises:
        ValueError, FileNotFoundError, IncompatibleEmbeddingsError, OutputExistsError: bad
            inputs (incl. duplicate ids, non-finite vectors, k > N - 1), before any output is
            written.
        JobFailedError: the pipeline lost rows; no manifest is written.
    """
    with content_checks(options.verify):
        return _run(options, pipeline)


@dataclass
class _PairsRun:
    """What a run searches and how, settled before any vector is read (see :func:`_plan`)."""

    datasets: list
    n: int
    dim: int
    budget: int  # --worker-memory in bytes
    method: str  # "exact" or "clustered"
    reader: VectorReader
    beam_options: PipelineOptions | None
    local: bool  # a local runner (the launcher may search itself)
    memory: MemoryPlan
    blocking: Blocking | None  # clustered mode's plan
    reuse: Reuse | str  # what an incremental run reuses, or why the run is a full one
    in_process: bool  # the launcher searches the vectors its scan read
    scan: Scan | None = None  # the checked vectors, until searched
    # An incremental clustered run's previous centroids and every row's blocks.
    blocks: tuple[np.ndarray, np.ndarray] | None = None


def _run(options: Options, pipeline: beam.Pipeline | None) -> Result:
    """:func:`run` inside the content checks."""
    run = _plan(options, pipeline)
    start = time.perf_counter()
    run.scan = _scan(run, options)
    seconds = {"scan": time.perf_counter() - start}
    _assign_previous_blocks(run, options)
    # --incremental replaces the folder's own previous pairs output (nothing else) as a rerun.
    out = stage_output("pairs", options, LAYOUT, replace_kind=replace_kind(options))
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    with out:
        show_progress_unless_quiet(here=run.local)
        runner, recall, details = _search(run, options, out.attempt, pipeline, seconds)
        summary = _check_outputs(run, options, out.attempt, recall, details, start)
        if not isinstance(run.reuse, Reuse):
            details["incremental"] = full_run("pairs", options.output, run.reuse)
        details["memory_budget"] = run.memory.describe(peak_rss())
        manifest = pairs_manifest(
            options, run.datasets, summary, run.reader, run.budget, details, runner, seconds
        )
        _delete_work_dir(out.attempt)
        return Result(options.output, out.commit(manifest), summary)


def _plan(options: Options, pipeline: beam.Pipeline | None) -> _PairsRun:
    """Open the inputs and settle the method, the memory, the blocking and what is reused.

    Raises:
        ValueError: ``--k`` asks for more neighbours than there are other items.
        ResourceError: the run would not fit (from the manifests' sizes, before any vector
            is read).
    """
    datasets = open_inputs(options.embeddings, ExternalColumns.from_args(options))
    dim = datasets[0].dim
    n = sum(dataset.count for dataset in datasets)
    if n and n - 1 < options.k:
        raise ValueError(
            f"--k {options.k} asks for more neighbours than the {n} embeddings have "
            f"(each item has {n - 1} others); use --k {max(n - 1, 1)} or less"
            if n > 1
            else f"{', '.join(options.embeddings)}: 1 embedding, no other item to pair it with"
        )
    budget = options.worker_memory_bytes()
    method = choose_method(options.method, n, dim, budget, options.worker_memory)
    reader = VectorReader(tuple(all_shards(datasets)), dim, needs_normalizing(datasets[0].manifest))
    beam_options = _beam_options(options, pipeline)
    local = beam_options is None or _is_local(beam_options)
    here = beam_options is None or _workers_here(beam_options, pipeline)
    memory = check_memory(
        options.budget(),
        method,
        n,
        dim,
        _blocking_request(options),
        threshold=options.threshold is not None,
        worker_memory=budget,
        here=here,
    )
    blocking = None
    if method == "clustered" and n:
        blocking = plan_blocking(_blocking_request(options), n, dim, memory.worker_bytes)
    refuse_remote_workers(datasets, here=here)
    # The previous version is read and verified before the output is prepared.
    reuse = _reuse(options, datasets, method, reader, local, min(budget, memory.budget.bytes))
    # A local exact run that fits one worker searches the vectors of the scan itself; so does an
    # incremental one.
    in_process = n > 0 and local
    in_process &= isinstance(reuse, Reuse) or (
        method == "exact"
        and exact_path(n, dim, options.k, options.threshold is not None, budget) == "whole"
    )
    return _PairsRun(
        datasets=datasets,
        n=n,
        dim=dim,
        budget=budget,
        method=method,
        reader=reader,
        beam_options=beam_options,
        local=local,
        memory=memory,
        blocking=blocking,
        reuse=reuse,
        in_process=in_process,
    )


# The search modules (torch and numba: seconds of imports) load while the scan reads.
_SEARCH_MODULES = ("sbert_pipeline.pairs.exact", "sbert_pipeline.pairs.settings")
_CLUSTERED_MODULES = ("sbert_pipeline.pairs.clustered",)  # its transforms load Beam


def _scan(run: _PairsRun, options: Options) -> Scan:
    """Read every vector once: unique ids and finite values are checked here, before any output
    exists, and the rows the blocking samples (and, searched in process, every row) kept.

    Arrow decodes the shards on the scan's thread, without Python's lock, so the search modules
    load meanwhile; the scan's time is the time until both are done.
    """
    with ThreadPoolExecutor(1, thread_name_prefix="pairs-scan") as pool:
        picks = run.blocking.picks() if run.blocking is not None else {}
        scanning = pool.submit(run.reader.scan, picks, run.in_process)
        from sbert_pipeline.vectors.block_search import warm_up

        clustered = _CLUSTERED_MODULES if run.method == "clustered" else ()
        for module in (*_SEARCH_MODULES, *clustered):
            importlib.import_module(module)
        if run.in_process:
            warm_up(run.dim, options.k, options.precision)
        return scanning.result()


def _assign_previous_blocks(run: _PairsRun, options: Options) -> None:
    """An incremental clustered run's rows in the previous version's blocks, or the reason
    (in ``run.reuse``) why the run is a full one after all."""
    if not (isinstance(run.reuse, Reuse) and run.method == "clustered"):
        return
    from sbert_pipeline.pairs.clustered_incremental import assign_blocks

    blocks = assign_blocks(options.output, run.reuse.previous, *run.scan.loaded, run.reuse.old_ids)
    if isinstance(blocks, str):
        run.reuse = blocks
    else:
        run.blocks = blocks


def _search(
    run: _PairsRun, options: Options, attempt: str, pipeline, seconds: dict
) -> tuple[str, float | None, dict]:
    """Write the neighbour lists (and the pairs) into ``attempt`` by the planned search.

    Returns:
        ``(runner, recall, manifest sections)``; ``seconds["pipeline"]`` is set.
    """
    from sbert_pipeline.pairs.settings import PairsSettings

    settings = PairsSettings(attempt, run.reader, options.k, options.threshold, options.precision)
    scan, run.scan = run.scan, None  # the vectors are freed once searched
    details: dict = {}
    recall = 1.0 if run.method == "exact" else None
    if run.n == 0:
        write_table(part_path(attempt, NEIGHBORS, 0, 1), NEIGHBORS_SCHEMA.empty_table())
        return "launcher", recall, details
    if isinstance(run.reuse, Reuse) and run.method == "clustered":
        from sbert_pipeline.pairs.clustered_incremental import run_clustered_incremental

        section, details["clustered"], recall = run_clustered_incremental(
            settings,
            *scan.loaded,
            run.reuse,
            options.output,
            run.blocks,
            recall_sample=options.recall_sample,
            seed=options.seed,
            shards=options.shards,
        )
        details["incremental"] = section
        seconds["pipeline"] = section["seconds"]
        return "in-process", recall, details
    if isinstance(run.reuse, Reuse):
        from sbert_pipeline.pairs.exact_incremental import run_exact_incremental

        details["incremental"] = run_exact_incremental(
            settings, *scan.loaded, run.reuse, options.output, options.ranges
        )
        details["exact"] = {
            "ranges": details["incremental"]["ranges"],
            "path": "incremental",
            "worker_bytes_needed": exact_worker_bytes(run.n, run.dim),
        }
        seconds["pipeline"] = details["incremental"]["seconds"]
        return "in-process", recall, details
    run_transform = _transform_runner(run.beam_options, pipeline)
    if run.method == "exact":
        from sbert_pipeline.pairs.exact import run_exact

        details["exact"], finished = run_exact(
            settings, run.n, run.dim, options.ranges, run_transform, run.budget, loaded=scan.loaded
        )
        seconds["pipeline"] = finished.seconds
        return finished.runner, recall, details
    from sbert_pipeline.pairs.clustered import ClusteredOptions, run_clustered

    clustered = ClusteredOptions(
        options.target_recall, options.iterations, options.seed, options.shards, options.sample
    )
    details["clustered"], finished, recall = run_clustered(
        settings, run.blocking, scan, clustered, run_transform, seconds
    )
    return finished.runner, recall, details


def _check_outputs(
    run: _PairsRun, options: Options, attempt: str, recall, details: dict, start: float
) -> PairsSummary:
    """Complete the outputs (an empty pairs shard where none is written), check that every item
    has its list, and sum the run up.

    Raises:
        JobFailedError: the search lost items; nothing is published.
    """
    if options.threshold is None or run.n == 0:
        write_table(part_path(attempt, PAIRS, 0, 1), PAIRS_SCHEMA.empty_table())
    rows = count_rows(shard_paths(join(attempt, NEIGHBORS)))
    if rows != run.n:
        raise JobFailedError(
            f"the search wrote neighbour lists for {rows} of {run.n} items; "
            f"nothing was published and the previous content of {options.output} is "
            "unchanged"
        )
    pairs = count_rows(shard_paths(join(attempt, PAIRS)))
    if options.known_pairs:
        details["known_pairs"] = known_pairs_recall(options.known_pairs, attempt, options.threshold)
    return PairsSummary(
        options.output,
        run.method,
        run.n,
        options.k,
        options.threshold,
        pairs,
        recall,
        time.perf_counter() - start,
        details.get("incremental"),
    )


def _delete_work_dir(attempt: str) -> None:
    """The search's temporary files are not part of the output."""
    from sbert_pipeline.pairs.settings import WORK_DIR

    if FileSystems.exists(join(attempt, WORK_DIR)):
        FileSystems.delete([join(attempt, WORK_DIR)])


def _reuse(options, datasets, method, reader, local, budget) -> Reuse | str:
    """What this run reuses of its previous output (:func:`plan_reuse`), or why it is a full
    run; the exact incremental search runs in the launcher, on every vector."""
    reuse = plan_reuse(options, datasets, method, reader.normalize)
    if not isinstance(reuse, Reuse):
        return reuse
    n = sum(dataset.count for dataset in datasets)
    if not local:
        return "the incremental search runs in the launcher, with a local runner only"
    if exact_worker_bytes(n, reader.dim) > budget:
        return (
            f"all {n} vectors do not fit --worker-memory {options.worker_memory} "
            f"and --memory-budget {options.memory_budget}"
        )
    return reuse


def _beam_options(options: Options, pipeline: beam.Pipeline | None) -> PipelineOptions | None:
    """The run's Beam options, or None where none were given (and no test pipeline): then the
    runner is the local one (``beam_options.pipeline_options([])``), known without
    loading Beam, which the launcher's own search never needs."""
    if pipeline is None and not options.beam_options:
        return None
    from sbert_pipeline.stage_api.beam_run import options_for

    return options_for(options.beam_options, pipeline)


def _workers_here(beam_options: PipelineOptions, pipeline: beam.Pipeline | None) -> bool:
    from sbert_pipeline.stage_api.beam_run import workers_here

    return workers_here(beam_options, pipeline)


def _is_local(beam_options: PipelineOptions) -> bool:
    from sbert_pipeline.stage_api.beam_options import is_local

    return is_local(beam_options)


def _transform_runner(
    beam_options: PipelineOptions | None, pipeline: beam.Pipeline | None
) -> RunTransform:
    """What runs one transform as a pipeline (``beam_run.transform_runner``), Beam loaded on its
    first call: the launcher's own search never makes one."""

    def run(label: str, transform: beam.PTransform):
        from sbert_pipeline.stage_api.beam_options import pipeline_options
        from sbert_pipeline.stage_api.beam_run import transform_runner

        chosen = beam_options if beam_options is not None else pipeline_options([])
        return transform_runner(chosen, pipeline)(label, transform)

    return run


def _blocking_request(options: Options) -> BlockingRequest:
    """The clustered-mode options as the plan takes them."""
    return BlockingRequest(
        k=options.k,
        clusters=options.clusters,
        nprobe=options.nprobe,
        max_block=options.max_block,
        sample=options.sample,
        tune_sample=options.tune_sample,
        recall_sample=options.recall_sample,
        seed=options.seed,
        worker_memory=options.worker_memory,
    )
