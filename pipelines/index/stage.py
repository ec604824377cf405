"""The index stage: embeddings -> a FAISS index chosen under a memory budget, with measured recall.

Run from Python as ``index.run(index.Options(embeddings=..., output=...))``,
or with the command ``sbert index`` (its ``--help`` lists the options).

``auto`` picks Flat, HNSW, IVF-Flat or OPQ+IVF-PQ for the corpus size and budget (see
``pipelines/index/planner.py``); when both HNSW and IVF-Flat fit, both are tried on a sample and
the one predicted faster at the target recall is built (``pipelines/index/trial.py``). The
index is trained on a sample, filled in batches read as a stream, and its search parameter
(nprobe / efSearch) is set to the smallest value whose recall@10 against exact search on
held-out vectors reaches ``--target-recall``. Without ``--shards`` everything runs in this
process; with ``--shards S`` a Beam pipeline fills S shards in parallel workers and the launcher
merges them. Everything is written under ``OUTPUT/_attempts/<run id>/`` and published with
``_manifest.json`` in one step, so a failed or killed build leaves the previous index as it was.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

import apache_beam as beam
import faiss
from sbert_pipeline.index.build import BuildSettings, BuiltIndex, build_index
from sbert_pipeline.index.faiss_ops import default_train_sample, min_train_points, new_index
from sbert_pipeline.index.files import (
    IDS_FILE,
    INDEX_FILE,
    FileDigest,
    commit_index_output,
    id_batches,
    in_index_order,
    write_ids,
    write_index_file,
)
from sbert_pipeline.index.incremental import (
    PreviousIndex,
    UpdatedIndex,
    find_previous_index,
    update_index,
)
from sbert_pipeline.index.options import Options
from sbert_pipeline.index.planner import (
    POINTS_PER_CENTROID,
    IndexPlan,
    MemoryEstimate,
    ProcessMemory,
    estimate_for_factory,
    plan_index,
)
from sbert_pipeline.index.sharded import (
    BuildIndexShards,
    IncompleteShardsError,
    finish_sharded_build,
    prepare_sharded_build,
)
from sbert_pipeline.index.trial import TrialChoice, choose_by_trial
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.external_vectors import ExternalColumns, open_inputs, refuse_remote_workers
from sbert_pipeline.io.manifest_fields import created_now, software_versions
from sbert_pipeline.io.output_dir import OutputLayout
from sbert_pipeline.io.previous_output import full_run, incremental_record
from sbert_pipeline.io.resources import MemoryBudget, peak_rss, require_memory, resident_bytes
from sbert_pipeline.io.sizes import format_size
from sbert_pipeline.stage_api.beam_run import (
    options_for,
    show_progress,
    transform_runner,
    workers_here,
)
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.stage_output import stage_output
from sbert_pipeline.stage_api.stops import JobFailedError

logger = logging.getLogger(__name__)

# What an index run writes (see pipelines/index/files.py).
LAYOUT = OutputLayout(files=(INDEX_FILE, IDS_FILE, "shards/*.faiss"))
# What an incremental update keeps of the previous manifest: the choice it made at training.
_KEPT_FIELDS = (
    "factory_requested",
    "train_sample_requested",
    "memory_budget_bytes",
    "plan",
    "trial",
)


@dataclass(frozen=True)
class IndexSummary:
    """What a finished index job reports."""

    output: str
    factory: str
    n: int
    search_params: dict[str, int]
    recall: float
    target: float
    queries_per_s: float
    size_bytes: int
    seconds: float

    def line(self) -> str:
        """One-line human summary (with a warning when the target recall was missed)."""
        params = ", ".join(f"{k}={v}" for k, v in self.search_params.items()) or "exact"
        missed = (
            ""
            if self.recall >= self.target
            else f" WARNING: below the target {self.target:.2f} where searching more stops"
            " gaining recall; choose a larger index (--factory or --memory-budget)"
        )
        return (
            f"indexed {self.n} vectors as {self.factory} ({params}): recall@10 {self.recall:.3f}"
            f", {self.queries_per_s:.0f} queries/s, {format_size(self.size_bytes)} in "
            f"{self.seconds:.1f}s -> {self.output}{missed}"
        )


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Plan, build, tune and write the index; returns once its manifest is published.

    Args:
        options: the stage's options (checked when they were built).
        pipeline: a pipeline to build the sharded fill into (tests pass a ``TestPipeline``).

    Raises:
        FileNotFoundError, OutputExistsError, ValueError (incl. BudgetTooSmallError): before
            any work starts.
        JobFailedError: the sharded pipeline lost a shard.
    """
    with content_checks(options.verify):
        return _run(options, pipeline)


def _run(options: Options, pipeline: beam.Pipeline | None) -> Result:
    """:func:`run` inside the content checks."""
    budget = options.budget()
    (data,) = open_inputs([options.embeddings], ExternalColumns.from_args(options))
    if options.shards is not None:  # the shards are filled by Beam workers
        here = workers_here(options_for(options.beam_options, pipeline), pipeline)
        refuse_remote_workers([data], here=here)
    elif options.beam_options:  # as in `sbert run`: without shards, no pipeline runs
        logger.warning(
            "the index is built in this process: the Beam options apply to the sharded fill "
            "(--shards S)"
        )
    n = data.count
    if n == 0:
        raise ValueError(f"{options.embeddings} holds no embeddings; there is nothing to index")
    auto = options.factory == "auto"
    # What the process holds besides the index, counted before any vector is read.
    process = ProcessMemory(
        resident=resident_bytes(),
        batch_rows=options.batch_size,
        query_rows=min(options.queries, max(n // 10, 1)),
        train_sample=options.train_sample,
    )
    plan = plan_index(n, data.dim, options.metric, budget, process) if auto else None
    if plan is None:  # a bad factory, or one this corpus cannot train, fails before writing
        _check_trainable(options.factory, data.dim, options.metric, n, options.train_sample)
        _require_factory_memory(options, n, data.dim, process, budget)
    settings = BuildSettings(
        factory=options.factory,
        metric=options.metric,
        target_recall=options.target_recall,
        train_sample=options.train_sample,
        n_queries=options.queries,
        batch_size=options.batch_size,
        seed=options.seed,
    )
    previous = find_previous_index(options, data, plan)  # before the output is prepared
    out = stage_output(
        "index", options, LAYOUT, replace_kind="index" if options.incremental else None
    )
    with out:
        reason = previous
        if isinstance(previous, PreviousIndex):
            start = time.perf_counter()
            updated = update_index(previous, data, options)
            if isinstance(updated, UpdatedIndex):
                return _write_update(options, out, data, previous.manifest, updated, start)
            reason = updated
        record = full_run("index", options.output, reason)
        return _build(options, out, data, (plan, n, budget), settings, pipeline, record)


def _factory_estimate(factory: str, n: int, dim: int, metric: str) -> MemoryEstimate:
    """The planner's estimate of ``factory``, or a zero-byte stand-in (the index itself not
    counted) for a factory outside the planner's four families."""
    estimate = estimate_for_factory(factory, n, dim, metric)
    return estimate or MemoryEstimate(factory, "flat", 0, "not estimated", None)


def _require_factory_memory(
    options: Options, n: int, dim: int, process: ProcessMemory, budget: MemoryBudget
) -> None:
    """Refuse an explicit ``--factory`` whose build would not fit the budget, before writing."""
    estimate = _factory_estimate(options.factory, n, dim, options.metric)
    parts = process.parts(estimate, n, dim)
    require_memory(
        parts["total"],
        budget,
        f"--factory {options.factory} over {n:,} vectors of dimension {dim} "
        f"({process.describe(parts)})",
        "choose a smaller index (--factory auto picks one that fits), a smaller --batch-size "
        "or --train-sample",
    )


def _check_trainable(factory: str, dim: int, metric: str, n: int, train_sample: int | None) -> None:
    """Refuse a factory string FAISS rejects or cannot train on ``n`` vectors, before writing."""
    if train_sample is not None and train_sample <= 0:
        raise ValueError(f"--train-sample must be positive, got {train_sample}")
    index = new_index(factory, dim, metric)
    if index.is_trained:
        return
    n_train = min(n, train_sample or default_train_sample(index, n))
    need = min_train_points(index)
    if n_train < need:
        raise ValueError(
            f"--factory {factory} needs at least {need} training vectors "
            f"({POINTS_PER_CENTROID * need} recommended), but only {n_train} are available "
            f"({n} vectors, --train-sample {train_sample}); choose a smaller index or a larger "
            "sample"
        )


def _build(options: Options, out, data, sized, settings, pipeline, record: dict) -> Result:
    """Choose, build, tune and write the index into ``out``'s attempt area, then publish;
    ``record`` is the manifest's ``incremental`` section (why this is a full build)."""
    plan, n, budget = sized
    start = time.perf_counter()
    trial = None
    if plan is not None and options.trial_sample != 0:
        trial = choose_by_trial(
            data,
            plan,
            options.target_recall,
            seed=options.seed,
            n_sample=options.trial_sample,
            batch_size=options.batch_size,
            room=budget.bytes - resident_bytes(),
        )
    chosen = trial.chosen if trial else plan.chosen if plan else None
    factory = chosen.factory if chosen else options.factory
    settings = replace(settings, factory=factory)
    if options.shards is None:
        show_progress()  # the whole build runs in this process
        built = build_index(data, settings)
        size, sha256 = write_index_file(built.index, out.path(INDEX_FILE))
        index_files, runner = [FileDigest(INDEX_FILE, size, sha256)], None
    else:
        built, index_files, runner = _build_sharded(options, out.attempt, data, settings, pipeline)
    rows, ids_size, ids_sha = write_ids(
        out.path(IDS_FILE),
        in_index_order(id_batches(data, data.has_text), built.held_out),
        data.has_text,
    )
    seconds = time.perf_counter() - start
    manifest = commit_index_output(
        out,
        index_files=index_files,
        ids_file=FileDigest(IDS_FILE, ids_size, ids_sha),
        ids_rows=rows,
        fields={
            **_manifest_fields(options, data, n, (plan, trial), built, budget, runner, seconds),
            "incremental": record,
        },
    )
    return _result(options, manifest, built, seconds)


def _result(options: Options, manifest: dict, built: BuiltIndex, seconds: float) -> Result:
    """The stage's result for a published ``manifest``."""
    summary = IndexSummary(
        output=options.output,
        factory=built.factory,
        n=int(manifest["ntotal"]),
        search_params=built.tuning.search_params,
        recall=built.tuning.recall,
        target=options.target_recall,
        queries_per_s=built.queries_per_s,
        size_bytes=manifest["size_bytes"],
        seconds=seconds,
    )
    return Result(options.output, manifest, summary)


def _write_update(
    options: Options,
    out,
    data: EmbeddingsDataset,
    previous: dict,
    updated: UpdatedIndex,
    start: float,
) -> Result:
    """Write the updated index and its ids into ``out``'s attempt area, then publish."""
    built = updated.built
    size, sha256 = write_index_file(built.index, out.path(INDEX_FILE))
    rows, ids_size, ids_sha = write_ids(out.path(IDS_FILE), updated.id_batches, data.has_text)
    seconds = time.perf_counter() - start
    estimate = estimate_for_factory(built.factory, rows, data.dim, options.metric)
    params = built.tuning.search_params
    reused = [
        f"the trained index {built.factory} (not retrained)",
        f"the vectors of {updated.rows[0]} unchanged rows",
    ]
    recomputed = [
        f"removed {updated.rows[2]} gone or changed rows",
        f"added {updated.rows[1]} new rows",
        f"recall@10 on {built.n_queries} held-out new rows",
        "ids.parquet",
    ]
    if params == previous["search_params"]:
        reused.append(f"its tuned search parameters ({params or 'exact search'})")
    else:
        recomputed.append(f"search parameters re-tuned: {previous['search_params']} -> {params}")
    record = incremental_record(
        previous, rows=updated.rows, reused=reused, recomputed=recomputed, seconds=seconds
    )
    fields = {
        **built.manifest_fields(),
        "recall_method": updated.recall_method,
        **{name: previous.get(name) for name in _KEPT_FIELDS},
        "memory_estimate_bytes": estimate.bytes if estimate else None,
        "memory_estimate_formula": estimate.formula if estimate else None,
        **_memory_fields(options.budget()),
        "shards": None,
        "has_text": data.has_text,
        "embeddings": {"directory": data.directory, "manifest": data.manifest},
        "software": software_versions(faiss=faiss.__version__),
        "total_seconds": round(seconds, 3),
        "created": created_now(),
        "incremental": record,
    }
    manifest = commit_index_output(
        out,
        index_files=[FileDigest(INDEX_FILE, size, sha256)],
        ids_file=FileDigest(IDS_FILE, ids_size, ids_sha),
        ids_rows=rows,
        fields=fields,
    )
    return _result(options, manifest, built, seconds)


def _build_sharded(options: Options, attempt: str, data, settings, pipeline):
    """Train here, fill shards in Beam workers (writing below ``attempt``), merge here."""
    beam_options = options_for(options.beam_options, pipeline)
    show_progress(beam_options)
    build, trained = prepare_sharded_build(data, attempt, settings, options.shards)
    fill = transform_runner(beam_options, pipeline)("BuildIndexShards", BuildIndexShards(build))
    try:
        built, files = finish_sharded_build(build, trained)
    except IncompleteShardsError as err:
        raise JobFailedError(
            f"{err}; nothing was published and the previous content of {options.output} is "
            "unchanged"
        ) from err
    built.seconds["fill_pipeline"] = fill.seconds
    return built, files, fill.runner


def _manifest_fields(
    options: Options,
    data: EmbeddingsDataset,
    n: int,
    choice: tuple[IndexPlan | None, TrialChoice | None],
    built: BuiltIndex,
    budget: MemoryBudget,
    runner: str | None,
    seconds: float,
) -> dict:
    plan, trial = choice
    estimate = estimate_for_factory(built.factory, n, data.dim, options.metric)
    return {
        **built.manifest_fields(),
        "factory_requested": options.factory,
        "train_sample_requested": options.train_sample,
        "memory_budget_bytes": budget.bytes,
        **_memory_fields(budget),
        "memory_estimate_bytes": estimate.bytes if estimate else None,
        "memory_estimate_formula": estimate.formula if estimate else None,
        "plan": plan.to_json() if plan else None,
        "trial": trial.to_json() if trial else None,
        "shards": None
        if options.shards is None
        else {"requested": options.shards, "runner": runner},
        "has_text": data.has_text,
        "embeddings": {"directory": data.directory, "manifest": data.manifest},
        "software": software_versions(faiss=faiss.__version__),
        "total_seconds": round(seconds, 3),
        "created": created_now(),
    }


def _memory_fields(budget: MemoryBudget) -> dict:
    """The budget the stage ran under and the process's measured peak, for the manifest."""
    return {"memory_budget": budget.to_json(), "peak_rss_bytes": peak_rss()}
