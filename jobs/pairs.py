"""``sbert pairs``: every item's k most similar items, and every similar pair, from embeddings.

    sbert pairs --embeddings DIR [DIR ...] --output DIR [--k 10] [--threshold T]
        [--method auto|exact|clustered] [--clusters C] [--nprobe P | --target-recall R]
        [--tune-sample Q] [--recall-sample Q] [--max-block B] [--known-pairs FILE]
        [--worker-memory 4GB] [--ranges R]
        [--shards S] [--sample N] [--seed S] [--precision auto|bfloat16|float32]
        [--overwrite] [Beam options]

exact: every vector against every vector (``pipelines.vectors.allpairs``: float32 inner products
summed in float64 and rounded to float32, so the answer is brute force's ``X @ X.T`` to within
1e-6). When one worker can hold every row's candidate lists (``pipelines.pairs.plan.
whole_matrix_bytes`` within ``--worker-memory``), one search covers the upper triangle of the score
matrix once, in one Beam step, or in the launcher on a local runner, reusing the vectors its
check read (without Beam options the runner is the local one, and such a run never imports Beam:
its files go through ``pipelines.io.filesystems``); else query rows are cut into ranges
searched by Beam workers, each holding all vectors, ``n * d * 4`` bytes (twice that while
loading), and the job refuses exact mode when that does not fit ``--worker-memory``. Either
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

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.job_options import (
    job_output,
)
from jobs.parsers.pairs import build_parser
from pipelines.io.atomic import write_table
from pipelines.io.centroids import CENTROIDS
from pipelines.io.content_checks import content_checks
from pipelines.io.embeddings import all_shards, count_rows, shard_paths
from pipelines.io.external_vectors import ExternalColumns, open_inputs
from pipelines.io.filesystems import FileSystems
from pipelines.io.manifest_fields import created_now, model_fields, software_versions
from pipelines.io.output_dir import OutputLayout, join
from pipelines.io.pairs_output import NEIGHBORS, PAIRS
from pipelines.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from pipelines.io.sizes import parse_size
from pipelines.pairs.files import (
    VectorReader,
    needs_normalizing,
    part_path,
)
from pipelines.pairs.known_pairs import known_pairs_recall
from pipelines.pairs.plan import (
    BlockingRequest,
    choose_method,
    exact_path,
    plan_blocking,
)
from pipelines.stage_api.stops import JobFailedError
from pipelines.vectors.checks import check_cosine
from pipelines.vectors.progress import show_progress_unless_quiet

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from pipelines.pairs.exact import RunTransform

# What a pairs run writes (see docs/architecture.md, folder contracts).
LAYOUT = OutputLayout(datasets=(NEIGHBORS, PAIRS), files=(CENTROIDS,))


@dataclass(frozen=True)
class PairsSummary:
    """What a finished pairs job reports."""

    output: str
    method: str
    items: int
    k: int
    threshold: float | None
    pairs: int
    recall: float | None
    seconds: float

    def line(self) -> str:
        """One-line human summary."""
        pairs = f", {self.pairs} pairs >= {self.threshold}" if self.threshold is not None else ""
        if self.method == "exact":
            recall = "exact"
        elif self.recall is None:
            recall = "recall not measured"
        else:
            recall = f"recall@{self.k} {self.recall:.3f} on a sample"
        return (
            f"top-{self.k} neighbours of {self.items} embeddings ({self.method}, {recall}){pairs} "
            f"in {self.seconds:.1f}s -> {self.output}"
        )


def run(argv: list[str] | None = None, test_pipeline: beam.Pipeline | None = None) -> PairsSummary:
    """Search the embeddings and write the outputs; returns after the manifest is written.

    Args:
        argv: job options followed by any Beam options.
        test_pipeline: a pipeline to build the search into (tests pass a ``TestPipeline``).

    Raises:
        ValueError, FileNotFoundError, IncompatibleEmbeddingsError, OutputExistsError: bad
            options or inputs (incl. duplicate ids, non-finite vectors, k > N - 1), before any
            output is written.
        JobFailedError: the pipeline lost rows; no manifest is written.
    """
    args, beam_args = build_parser().parse_known_args(argv)
    with content_checks(args.verify):
        return _run(args, beam_args, argv, test_pipeline)


def _run(
    args, beam_args: list[str], argv: list[str] | None, test_pipeline: beam.Pipeline | None
) -> PairsSummary:
    """:func:`run` once the options are parsed."""
    _check_options(args)
    datasets = open_inputs(args.embeddings, ExternalColumns.from_args(args))
    dim = datasets[0].dim
    n = sum(dataset.count for dataset in datasets)
    if n and n - 1 < args.k:
        raise ValueError(
            f"--k {args.k} asks for more neighbours than the {n} embeddings have "
            f"(each item has {n - 1} others); use --k {max(n - 1, 1)} or less"
            if n > 1
            else f"{', '.join(args.embeddings)}: 1 embedding, no other item to pair it with"
        )
    budget = parse_size(args.worker_memory)
    method = choose_method(args.method, n, dim, budget, args.worker_memory)
    reader = VectorReader(tuple(all_shards(datasets)), dim, needs_normalizing(datasets[0].manifest))
    blocking = None
    if method == "clustered" and n:
        blocking = plan_blocking(_blocking_request(args), n, dim, budget)
    options = _beam_options(beam_args, test_pipeline)
    local = options is None or _is_local(options)
    # A local exact run that fits one worker searches the vectors of the scan itself.
    in_process = (
        method == "exact"
        and n > 0
        and local
        and exact_path(n, dim, args.k, args.threshold is not None, budget) == "whole"
    )
    job_start = time.perf_counter()
    # Unique ids and finite values are checked here, before any output exists. Arrow decodes
    # the shards on the scan's thread, without Python's lock, so the search modules (torch and
    # numba: seconds of imports) load meanwhile; "scan" is the time until both are done.
    with ThreadPoolExecutor(1, thread_name_prefix="pairs-scan") as pool:
        picks = blocking.picks() if blocking is not None else {}
        scanning = pool.submit(reader.scan, picks, in_process)
        from pipelines.pairs.exact import run_exact
        from pipelines.pairs.settings import WORK_DIR, PairsSettings
        from pipelines.vectors.block_search import warm_up

        if method == "clustered":  # its transforms load Beam
            from pipelines.pairs.clustered import ClusteredOptions, run_clustered
        if in_process:
            warm_up(dim, args.k, args.precision)
        scan = scanning.result()
    seconds = {"scan": time.perf_counter() - job_start}
    out = job_output("pairs", args.output, args.overwrite, argv, LAYOUT)
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    final, args.output = args.output, out.attempt
    with out:
        show_progress_unless_quiet(here=local)

        settings = PairsSettings(args.output, reader, args.k, args.threshold, args.precision)
        run_transform = _transform_runner(options, test_pipeline)
        details: dict = {}
        recall = 1.0 if method == "exact" else None
        if n == 0:
            write_table(part_path(args.output, NEIGHBORS, 0, 1), NEIGHBORS_SCHEMA.empty_table())
            runner = "launcher"
        elif method == "exact":
            details["exact"], finished = run_exact(
                settings, n, dim, args.ranges, run_transform, budget, loaded=scan.loaded
            )
            del scan
            runner, seconds["pipeline"] = finished.runner, finished.seconds
        else:
            clustered = ClusteredOptions(
                args.target_recall, args.iterations, args.seed, args.shards, args.sample
            )
            details["clustered"], finished, recall = run_clustered(
                settings, blocking, scan, clustered, run_transform, seconds
            )
            runner = finished.runner
        if args.threshold is None or n == 0:
            write_table(part_path(args.output, PAIRS, 0, 1), PAIRS_SCHEMA.empty_table())

        rows = count_rows(shard_paths(join(args.output, NEIGHBORS)))
        if rows != n:
            raise JobFailedError(
                f"the search wrote neighbour lists for {rows} of {n} items; "
                f"nothing was published and the previous content of {final} is unchanged"
            )
        pairs = count_rows(shard_paths(join(args.output, PAIRS)))
        if args.known_pairs:
            details["known_pairs"] = known_pairs_recall(
                args.known_pairs, args.output, args.threshold
            )
        summary = PairsSummary(
            final,
            method,
            n,
            args.k,
            args.threshold,
            pairs,
            recall,
            time.perf_counter() - job_start,
        )
        manifest = _manifest(args, datasets, summary, reader, budget, details, runner, seconds)
        if FileSystems.exists(join(args.output, WORK_DIR)):
            FileSystems.delete([join(args.output, WORK_DIR)])
        out.commit(manifest)
        return summary


def _beam_options(
    beam_args: list[str], test_pipeline: beam.Pipeline | None
) -> PipelineOptions | None:
    """The run's Beam options, or None where none were given (and no test pipeline): then the
    runner is the local one (``beam_options.pipeline_options([])``), known without
    loading Beam, which the launcher's own search never needs."""
    if test_pipeline is None and not beam_args:
        return None
    from pipelines.stage_api.beam_run import options_for

    return options_for(beam_args, test_pipeline)


def _is_local(options: PipelineOptions) -> bool:
    from pipelines.stage_api.beam_options import is_local

    return is_local(options)


def _transform_runner(
    options: PipelineOptions | None, test_pipeline: beam.Pipeline | None
) -> RunTransform:
    """What runs one transform as a pipeline (``beam_run.transform_runner``), Beam loaded on its
    first call: the launcher's own search never makes one."""

    def run(label: str, transform: beam.PTransform):
        from pipelines.stage_api.beam_options import pipeline_options
        from pipelines.stage_api.beam_run import transform_runner

        chosen = options if options is not None else pipeline_options([])
        return transform_runner(chosen, test_pipeline)(label, transform)

    return run


def check_options(argv: list[str]) -> None:
    """The option values, ``--worker-memory`` and the ``--known-pairs`` file, checked before
    ``sbert run`` starts any stage (no embeddings are read, no output touched); ValueError or
    FileNotFoundError names the option."""
    args, _ = build_parser().parse_known_args(argv)
    _check_options(args)
    parse_size(args.worker_memory)


def _check_options(args) -> None:
    """Refuse option values that cannot work, naming the option."""
    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}")
    if args.threshold is not None:
        check_cosine(args.threshold, "--threshold")
    for name in ("clusters", "nprobe", "max_block", "sample", "ranges", "shards"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.iterations < 1:
        raise ValueError(f"--iterations must be at least 1, got {args.iterations}")
    if args.recall_sample < 0 or args.tune_sample < 0:
        raise ValueError("--recall-sample and --tune-sample must be >= 0")
    if not 0.0 < args.target_recall <= 1.0:
        raise ValueError(f"--target-recall must be in (0, 1], got {args.target_recall}")
    if args.nprobe is None and args.tune_sample == 0 and args.method != "exact":
        raise ValueError("--tune-sample 0 leaves nothing to choose --nprobe with; give --nprobe")
    if args.method == "exact":
        clustered_only = [
            f"--{name.replace('_', '-')}"
            for name in ("clusters", "nprobe", "max_block", "sample", "shards")
            if getattr(args, name) is not None
        ]
        if clustered_only:
            raise ValueError(f"{', '.join(clustered_only)} apply to --method clustered")
    if args.method == "clustered" and args.ranges is not None:
        raise ValueError("--ranges applies to --method exact")
    if args.known_pairs is not None and not FileSystems.exists(args.known_pairs):
        raise FileNotFoundError(f"--known-pairs {args.known_pairs}: no such file")


def _blocking_request(args: argparse.Namespace) -> BlockingRequest:
    """The clustered-mode options of the command line."""
    return BlockingRequest(
        k=args.k,
        clusters=args.clusters,
        nprobe=args.nprobe,
        max_block=args.max_block,
        sample=args.sample,
        tune_sample=args.tune_sample,
        recall_sample=args.recall_sample,
        seed=args.seed,
        worker_memory=args.worker_memory,
    )


def _manifest(args, datasets, summary, reader, budget, details, runner, seconds) -> dict:
    """The ``_manifest.json`` of a finished run (model fields first, for later stages' checks)."""
    first = datasets[0].manifest
    clustered = summary.method == "clustered"
    if summary.method == "exact":
        recall = {"measured": False, "why": "exact search: every list is the exact top-k"}
    else:
        queries = min(args.recall_sample, summary.items)
        recall = {
            "measured": summary.recall is not None,
            "queries": queries,
            "seed": args.seed,
            "definition": "mean over random queries of |found neighbours that are among the "
            "exact top-k (or tie with its k-th score)| / k; exact = fp32 search of all vectors",
        }
    if args.threshold is None:
        completeness = None
    elif clustered:
        completeness = "every pair >= threshold that shares a cluster block (see recall_at_k)"
    else:
        completeness = "every pair >= threshold (exact)"
    return {
        "kind": "pairs",
        **model_fields(first),
        "method": summary.method,
        "method_requested": args.method,
        "k": args.k,
        "threshold": args.threshold,
        "recall_at_k": None if summary.recall is None else round(summary.recall, 6),
        "recall": recall,
        "pairs": {"count": summary.pairs, "threshold": args.threshold, "complete": completeness},
        "counts": {
            "items": summary.items,
            "neighbor_rows": summary.items,
            "short_lists": details.get("clustered", {}).get("short_lists", 0),
            "pairs": summary.pairs,
        },
        "normalized_here": reader.normalize,
        "worker_memory_bytes": budget,
        **details,
        "precision": args.precision,
        "seed": args.seed,
        "embeddings": [
            {"directory": dataset.directory, "manifest": dataset.manifest} for dataset in datasets
        ],
        "runner": runner,
        "software": software_versions(),
        "seconds": round(summary.seconds, 3),
        "seconds_parts": {name: round(value, 3) for name, value in seconds.items()},
        "created": created_now(),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run and print the summary."""
    summary = run(argv)
    print(summary.line())
    return 0
