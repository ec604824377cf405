"""``sbert index``: embeddings -> a FAISS index chosen under a memory budget, with measured recall.

    sbert index --embeddings out/embeddings --output out/index
        [--factory auto|<faiss factory string>] [--memory-budget 4GB] [--target-recall 0.95]
        [--metric ip|l2] [--train-sample N] [--trial-sample N] [--queries 1000]
        [--shards S] [--overwrite]
        [Beam options, with --shards: --runner, --direct_num_workers, ...]

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

from jobs.errors import JobFailedError
from jobs.job_options import job_output
from jobs.parsers.index import build_parser
from jobs.pipeline_run import options_for, show_progress, transform_runner
from pipelines.index.build import BuildSettings, BuiltIndex, build_index
from pipelines.index.faiss_ops import default_train_sample, min_train_points, new_index
from pipelines.index.files import (
    IDS_FILE,
    INDEX_FILE,
    FileDigest,
    commit_index_output,
    id_batches,
    in_index_order,
    write_ids,
    write_index_file,
)
from pipelines.index.planner import (
    POINTS_PER_CENTROID,
    IndexPlan,
    estimate_for_factory,
    plan_index,
)
from pipelines.index.sharded import (
    BuildIndexShards,
    IncompleteShardsError,
    finish_sharded_build,
    prepare_sharded_build,
)
from pipelines.index.trial import TrialChoice, choose_by_trial
from pipelines.io.content_checks import content_checks
from pipelines.io.embeddings import EmbeddingsDataset
from pipelines.io.external_vectors import ExternalColumns, open_inputs
from pipelines.io.manifest_fields import created_now, software_versions
from pipelines.io.output_dir import OutputLayout
from pipelines.io.sizes import format_size, parse_size

logger = logging.getLogger(__name__)

# What an index run writes (see pipelines/index/files.py).
LAYOUT = OutputLayout(files=(INDEX_FILE, IDS_FILE, "shards/*.faiss"))


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
            else f" WARNING: below the target {self.target:.2f} even at the largest setting;"
            " choose a larger index (--factory or --memory-budget)"
        )
        return (
            f"indexed {self.n} vectors as {self.factory} ({params}): recall@10 {self.recall:.3f}"
            f", {self.queries_per_s:.0f} queries/s, {format_size(self.size_bytes)} in "
            f"{self.seconds:.1f}s -> {self.output}{missed}"
        )


def run(argv: list[str] | None = None, test_pipeline: beam.Pipeline | None = None) -> IndexSummary:
    """Plan, build, tune and write the index; returns the summary after the manifest is written.

    Args:
        argv: job options followed by any Beam options (used with ``--shards``).
        test_pipeline: a pipeline to build the sharded fill into (tests pass a ``TestPipeline``).

    Raises:
        FileNotFoundError, OutputExistsError, ValueError (incl. BudgetTooSmallError): before
            any work starts.
        JobFailedError: the sharded pipeline lost a shard.
    """
    args, beam_args = build_parser().parse_known_args(argv)
    with content_checks(args.verify):
        return _run(args, beam_args, argv, test_pipeline)


def _run(
    args, beam_args: list[str], argv: list[str] | None, test_pipeline: beam.Pipeline | None
) -> IndexSummary:
    """:func:`run` once the options are parsed."""
    budget = _checked(args, beam_args)
    (data,) = open_inputs([args.embeddings], ExternalColumns.from_args(args))
    n = data.count
    if n == 0:
        raise ValueError(f"{args.embeddings} holds no embeddings; there is nothing to index")
    plan = plan_index(n, data.dim, args.metric, budget) if args.factory == "auto" else None
    if plan is None:  # a bad factory, or one this corpus cannot train, fails before writing
        _check_trainable(args.factory, data.dim, args.metric, n, args.train_sample)
    settings = BuildSettings(
        factory=args.factory,
        metric=args.metric,
        target_recall=args.target_recall,
        train_sample=args.train_sample,
        n_queries=args.queries,
        batch_size=args.batch_size,
        seed=args.seed,
    )
    out = job_output("index", args.output, args.overwrite, argv, LAYOUT)
    with out:
        return _build(args, out, data, (plan, n, budget), settings, beam_args, test_pipeline)


def check_options(argv: list[str]) -> None:
    """Check this command's option values without reading inputs or touching any output.

    ``sbert run`` calls it for every stage before running the first one.

    Raises:
        ValueError: a value the command would refuse, naming the option.
    """
    _checked(*build_parser().parse_known_args(argv))


def _checked(args, beam_args: list[str]) -> int:
    """Refuse bad option values, naming the option; returns the memory budget in bytes."""
    if not 0.0 < args.target_recall <= 1.0:
        raise ValueError(f"--target-recall must be in (0, 1], got {args.target_recall}")
    if args.trial_sample is not None and args.trial_sample < 0:
        raise ValueError(f"--trial-sample must be 0 (off) or positive, got {args.trial_sample}")
    if args.queries < 1 or args.batch_size < 1:
        raise ValueError("--queries and --batch-size must be positive")
    if args.shards is not None and args.shards < 1:
        raise ValueError(f"--shards must be at least 1, got {args.shards}")
    if beam_args and args.shards is None:
        raise ValueError(
            f"unrecognised arguments: {' '.join(beam_args)} (Beam options apply only with --shards)"
        )
    if args.train_sample is not None and args.train_sample <= 0:
        raise ValueError(f"--train-sample must be positive, got {args.train_sample}")
    return parse_size(args.memory_budget)


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


def _build(args, out, data, sized, settings, beam_args, test_pipeline) -> IndexSummary:
    """Choose, build, tune and write the index into ``out``'s attempt area, then publish."""
    plan, n, budget = sized
    start = time.perf_counter()
    trial = None
    if plan is not None and args.trial_sample != 0:
        trial = choose_by_trial(
            data, plan, args.target_recall, seed=args.seed, n_sample=args.trial_sample
        )
    chosen = trial.chosen if trial else plan.chosen if plan else None
    factory = chosen.factory if chosen else args.factory
    settings = replace(settings, factory=factory)
    if args.shards is None:
        show_progress()  # the whole build runs in this process
        built = build_index(data, settings)
        size, sha256 = write_index_file(built.index, out.path(INDEX_FILE))
        index_files, runner = [FileDigest(INDEX_FILE, size, sha256)], None
    else:
        built, index_files, runner = _build_sharded(
            args, out.attempt, data, settings, beam_args, test_pipeline
        )
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
        fields=_manifest_fields(args, data, n, (plan, trial), built, budget, runner, seconds),
    )
    return IndexSummary(
        output=args.output,
        factory=factory,
        n=n,
        search_params=built.tuning.search_params,
        recall=built.tuning.recall,
        target=args.target_recall,
        queries_per_s=built.queries_per_s,
        size_bytes=manifest["size_bytes"],
        seconds=seconds,
    )


def _build_sharded(args, attempt: str, data, settings, beam_args, test_pipeline):
    """Train here, fill shards in Beam workers (writing below ``attempt``), merge here."""
    options = options_for(beam_args, test_pipeline)
    show_progress(options)
    build, trained = prepare_sharded_build(data, attempt, settings, args.shards)
    fill = transform_runner(options, test_pipeline)("BuildIndexShards", BuildIndexShards(build))
    try:
        built, files = finish_sharded_build(build, trained)
    except IncompleteShardsError as err:
        raise JobFailedError(
            f"{err}; nothing was published and the previous content of {args.output} is unchanged"
        ) from err
    built.seconds["fill_pipeline"] = fill.seconds
    return built, files, fill.runner


def _manifest_fields(
    args,
    data: EmbeddingsDataset,
    n: int,
    choice: tuple[IndexPlan | None, TrialChoice | None],
    built: BuiltIndex,
    budget: int,
    runner: str | None,
    seconds: float,
) -> dict:
    plan, trial = choice
    estimate = estimate_for_factory(built.factory, n, data.dim, args.metric)
    return {
        **built.manifest_fields(),
        "factory_requested": args.factory,
        "memory_budget_bytes": budget,
        "memory_estimate_bytes": estimate.bytes if estimate else None,
        "memory_estimate_formula": estimate.formula if estimate else None,
        "plan": plan.to_json() if plan else None,
        "trial": trial.to_json() if trial else None,
        "shards": None if args.shards is None else {"requested": args.shards, "runner": runner},
        "has_text": data.has_text,
        "embeddings": {"directory": data.directory, "manifest": data.manifest},
        "software": software_versions(faiss=faiss.__version__),
        "total_seconds": round(seconds, 3),
        "created": created_now(),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run and print the summary."""
    summary = run(argv)
    print(summary.line())
    return 0
