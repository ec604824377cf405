"""``sbert pairs``: every item's k most similar items, and every similar pair, from embeddings.

    sbert pairs --embeddings DIR [DIR ...] --output DIR [--k 10] [--threshold T]
        [--method auto|exact|clustered] [--clusters C] [--nprobe P | --target-recall R]
        [--tune-sample Q] [--recall-sample Q] [--max-block B] [--known-pairs FILE]
        [--worker-memory 4GB] [--ranges R]
        [--shards S] [--sample N] [--seed S] [--precision auto|bfloat16|float32]
        [--overwrite] [Beam options]

exact: every vector against every vector (``pipelines.vectors.allpairs``: float32 inner products
summed in float64 and rounded to float32, so the answer is brute force's ``X @ X.T`` to within
1e-6). Query rows are cut into ``--ranges`` ranges searched by Beam workers; every worker holds all
vectors, ``n * d * 4`` bytes (twice that while loading), so the job refuses exact mode when
that does not fit ``--worker-memory``.

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

Output (DESIGN.md ``pairs/``): ``neighbors/`` Parquet (``id``, ``neighbor_ids``, ``scores``:
top-k per item, most similar first, equal scores by id), ``pairs/`` Parquet (``id_a < id_b``,
``score >= T``, each pair once; without ``--threshold`` it holds one empty shard with the
schema), ``centroids.npy`` (clustered), and ``_manifest.json``, written last and only on
success. With ``--threshold``, exact mode writes every pair at or above T however many there
are (not only those in the top-k lists); clustered mode writes every such pair that shares a
block. Vectors are L2-normalised first unless the embeddings are unit float32 rows already, so
scores are cosine similarities. Ids must be unique; ``N = 1`` is refused (no other item), an
empty input gives empty outputs and a manifest.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from jobs.beam_options import is_local, pipeline_options, runner_name
from jobs.errors import JobFailedError
from pipelines.io.centroids import CENTROIDS, save_centroids
from pipelines.io.embeddings import (
    MODEL_FIELDS,
    EmbeddingsDataset,
    all_shards,
    count_rows,
    shard_paths,
)
from pipelines.io.output_dir import OutputLayout, join, prepare_output
from pipelines.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from pipelines.io.sizes import format_size, parse_size
from pipelines.pairs.files import (
    NEIGHBORS,
    PAIRS,
    Scan,
    VectorReader,
    needs_normalizing,
    part_path,
    read_neighbors,
    read_pairs,
    write_table,
)
from pipelines.pairs.transforms import (
    WORK_DIR,
    ClusterBlockedPairs,
    ExactPairs,
    PairsSettings,
    plan_ranges,
    read_reports,
)
from pipelines.vectors.cluster_blocks import (
    BlockPlan,
    SampleTruth,
    Tuning,
    default_clusters,
    group_blocks,
    plan_blocks,
    recall_at_k,
)
from sbert_core import __version__

logger = logging.getLogger(__name__)

# What a pairs run writes (see DESIGN.md, data contracts).
LAYOUT = OutputLayout(datasets=(NEIGHBORS, PAIRS), files=(CENTROIDS,))

# auto: exact search up to this many vectors. Exact work grows as n^2: 100k x 384 took 98 s
# here (two shared cores; clustered 72 s at recall 0.98), so 200k is about 6.5 minutes, and 1M
# would be hours, where the clustered mode's work grows about as n^1.5.
EXACT_MAX_ROWS = 200_000
# Queries whose exact neighbours choose nprobe (the recall sample is kept apart from them, so
# the measured recall is not the one the choice was made on).
TUNE_SAMPLE = 500
# The largest block one worker searches by default: a 100k x 384 block is as much work as the
# exact search of 100k vectors (98 s here) and 150 MB of vectors, so no task runs for long.
DEFAULT_MAX_BLOCK = 100_000
# k-means sample: 32 rows per centroid, at least 20,000; blocking needs centroids that cover the
# data, not the cluster quality ``sbert cluster`` aims for (64 per centroid).
SAMPLE_PER_CLUSTER = 32
MIN_SAMPLE = 20_000
SAMPLE_BYTES = 2 * 1024**3
# Block groups at least (when there are as many blocks): one Beam element each, so that
# several workers share the search.
MIN_GROUPS = 16
# Query rows per exact range and items per clustered output shard.
ROWS_PER_RANGE = 10_000
ROWS_PER_SHARD = 100_000
# Fixed memory of a worker besides the vectors: the similarity tile of 2^26 scores and its masks
# (about 1 GiB) and Python, Beam and torch themselves.
WORKER_OVERHEAD = 1536 * 1024**2
BYTES_PER_ID = 100  # an id string in Arrow plus its sort index, generously


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


def build_parser() -> argparse.ArgumentParser:
    """Job options; anything not listed here is passed on to Beam's ``PipelineOptions``."""
    parser = argparse.ArgumentParser(
        prog="sbert pairs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--embeddings",
        required=True,
        nargs="+",
        action="extend",
        help="embeddings output directories (one model; several are searched together)",
    )
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--k", type=int, default=10, help="neighbours per item (default 10)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="also write every pair with cosine >= T to pairs/ (a cosine, in [-1, 1])",
    )
    parser.add_argument("--method", default="auto", choices=["auto", "exact", "clustered"])
    parser.add_argument(
        "--clusters",
        type=int,
        default=None,
        help="clustered: k-means centroids (default about sqrt(N), at least 4k items each)",
    )
    parser.add_argument(
        "--nprobe",
        type=int,
        default=None,
        help="clustered: blocks each vector joins (default: the fewest that reach --target-recall)",
    )
    parser.add_argument(
        "--target-recall",
        type=float,
        default=0.95,
        help="clustered: recall@k that chooses --nprobe (default 0.95)",
    )
    parser.add_argument(
        "--tune-sample",
        type=int,
        default=TUNE_SAMPLE,
        help=f"clustered: queries that choose --nprobe (default {TUNE_SAMPLE})",
    )
    parser.add_argument(
        "--max-block",
        type=int,
        default=None,
        help="clustered: clusters whose block would hold more vectors are split (default "
        f"{DEFAULT_MAX_BLOCK:,}, less if --worker-memory needs it)",
    )
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        help=f"clustered: rows the k-means fit uses (default {SAMPLE_PER_CLUSTER} per cluster, "
        f"at least {MIN_SAMPLE:,}, at most 2 GiB of vectors)",
    )
    parser.add_argument("--iterations", type=int, default=20, help="k-means iterations, at most")
    parser.add_argument(
        "--recall-sample",
        type=int,
        default=1000,
        help="clustered: queries whose lists are checked against exact search (0: none)",
    )
    parser.add_argument(
        "--known-pairs",
        default=None,
        help="Parquet file with id_a, id_b columns (e.g. known duplicates): the manifest "
        "records how many of them the output found",
    )
    parser.add_argument(
        "--worker-memory",
        default="4GB",
        help="memory one worker may use, e.g. 4GB, 16GiB (default 4GB): exact mode needs all "
        "vectors in each worker",
    )
    parser.add_argument(
        "--ranges",
        type=int,
        default=None,
        help=f"exact: query ranges, one Beam element each (default one per {ROWS_PER_RANGE:,})",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=None,
        help=f"clustered: output shards (default one per {ROWS_PER_SHARD:,} items)",
    )
    parser.add_argument("--seed", type=int, default=0, help="k-means and recall sample seed")
    parser.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="candidate pass of the exact search; results are the fp32 answer either way",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return parser


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
    _check_options(args)
    datasets = EmbeddingsDataset.open_many(args.embeddings)
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
    method = _method(args, n, dim, budget)
    reader = VectorReader(tuple(all_shards(datasets)), dim, needs_normalizing(datasets[0].manifest))
    blocking = _blocking(args, n, dim, budget) if method == "clustered" and n else None
    job_start = time.perf_counter()
    # Unique ids and finite values are checked here, before any output exists.
    scan = reader.scan(blocking.picks() if blocking is not None else {})
    seconds = {"scan": time.perf_counter() - job_start}
    options = test_pipeline.options if test_pipeline is not None else pipeline_options(beam_args)
    out = prepare_output(
        args.output,
        overwrite=args.overwrite,
        job={"command": "pairs", "argv": argv or sys.argv[1:]},
        layout=LAYOUT,
    )
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    final, args.output = args.output, out.attempt
    with out:
        if is_local(options):
            logging.getLogger("pipelines").setLevel(logging.INFO)

        settings = PairsSettings(args.output, reader, args.k, args.threshold, args.precision)
        details: dict = {}
        recall = 1.0 if method == "exact" else None
        if n == 0:
            write_table(part_path(args.output, NEIGHBORS, 0, 1), NEIGHBORS_SCHEMA.empty_table())
            runner = "launcher"
        elif method == "exact":
            ranges = plan_ranges(n, args.ranges or math.ceil(n / ROWS_PER_RANGE))
            runner, seconds["pipeline"] = _run_pipeline(
                "ExactPairs", ExactPairs(settings, ranges), options, test_pipeline
            )
            details["exact"] = {
                "ranges": len(ranges),
                "worker_bytes_needed": exact_worker_bytes(n, dim),
            }
        else:
            details["clustered"], runner, recall = _clustered(
                args, settings, blocking, scan, options, test_pipeline, seconds
            )
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
            details["known_pairs"] = _known_pairs(args.known_pairs, args.output, args.threshold)
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


@dataclass(frozen=True)
class Blocking:
    """The clustered mode's settings and sample rows, fixed before any data is read."""

    clusters: int
    nprobe: int | None  # None: chosen by the tuning queries
    max_block: int
    group_rows: int  # routed rows a worker holds at a time (one group of blocks)
    fit_rows: np.ndarray  # k-means sample
    tune_rows: np.ndarray  # queries that choose nprobe
    recall_rows: np.ndarray  # queries that measure the recall of the result

    def picks(self) -> dict[str, np.ndarray]:
        """The rows the launcher's scan collects."""
        return {"fit": self.fit_rows, "tune": self.tune_rows, "recall": self.recall_rows}


def exact_worker_bytes(n: int, dim: int) -> int:
    """Memory one exact-mode worker needs: all vectors twice (while sorting), ids, overhead."""
    return 2 * n * dim * 4 + n * BYTES_PER_ID + WORKER_OVERHEAD


def block_worker_bytes(block: int, dim: int) -> int:
    """Memory one clustered-mode worker needs for ``block`` routed rows (one block group): the
    rows read, concatenated and sorted (three copies at most), their ids, and overhead."""
    return 3 * block * dim * 4 + block * BYTES_PER_ID + WORKER_OVERHEAD


def check_options(argv: list[str]) -> None:
    """Check this command's option values without reading inputs or touching any output.

    ``sbert run`` calls it for every stage before running the first one.

    Raises:
        ValueError, FileNotFoundError: a value the command would refuse, naming the option.
    """
    args, _ = build_parser().parse_known_args(argv)
    _check_options(args)
    parse_size(args.worker_memory)


def _check_options(args) -> None:
    """Refuse option values that cannot work, naming the option."""
    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}")
    if args.threshold is not None and not -1.0 <= args.threshold <= 1.0:
        raise ValueError(f"--threshold is a cosine, in [-1, 1]; got {args.threshold}")
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


def _method(args, n: int, dim: int, budget: int) -> str:
    """exact or clustered: as asked, or by size and memory for auto."""
    needed = exact_worker_bytes(n, dim)
    if args.method == "exact" and needed > budget:
        raise ValueError(
            f"exact mode keeps all {n} vectors in every worker: about {format_size(needed)}, "
            f"more than --worker-memory {args.worker_memory}; use --method clustered or a "
            "larger --worker-memory"
        )
    if args.method != "auto":
        return args.method
    return "exact" if n <= EXACT_MAX_ROWS and needed <= budget else "clustered"


def _blocking(args, n: int, dim: int, budget: int) -> Blocking:
    """Clustered-mode settings checked against N and the memory, and the sample rows.

    The recall queries are drawn first; the tuning queries come from the other rows when there
    are enough, so that the recall is measured on queries the choice of nprobe did not see.
    """
    clusters = args.clusters or default_clusters(n, args.k)
    if clusters > n:
        raise ValueError(f"--clusters {clusters} is more than the {n} embeddings")
    if args.nprobe is not None and args.nprobe > clusters:
        raise ValueError(f"--nprobe {args.nprobe} is more than the {clusters} clusters")
    fits = (budget - WORKER_OVERHEAD) // (3 * dim * 4 + BYTES_PER_ID)
    if fits < args.k + 1:
        raise ValueError(
            f"--worker-memory {args.worker_memory} leaves no room for a block of vectors "
            f"(a worker needs about {format_size(WORKER_OVERHEAD)} besides them)"
        )
    max_block = args.max_block or min(DEFAULT_MAX_BLOCK, fits)
    if max_block > fits:
        raise ValueError(
            f"--max-block {max_block} needs about {format_size(block_worker_bytes(max_block, dim))}"
            f" per worker, more than --worker-memory {args.worker_memory}"
        )
    if max_block < args.k + 1:
        raise ValueError(f"--max-block {max_block} must exceed --k {args.k}")
    rng = np.random.default_rng([args.seed, 1])
    order = rng.permutation(n)
    recall_rows = order[: min(args.recall_sample, n)]
    tune_size = min(args.tune_sample if args.nprobe is None else 0, n)
    rest = order[len(recall_rows) :]
    tune_rows = rest[:tune_size] if len(rest) >= tune_size else order[:tune_size]
    return Blocking(
        clusters,
        args.nprobe,
        max_block,
        max(max_block, fits),
        _sample_rows(n, _fit_size(args, n, dim, clusters), args.seed),
        np.sort(tune_rows),
        np.sort(recall_rows),
    )


def _fit_size(args, n: int, dim: int, clusters: int) -> int:
    """The k-means sample size: as asked (at least the clusters) or the default, at most N."""
    if args.sample is not None:
        if args.sample < clusters:
            raise ValueError(f"--sample {args.sample} is smaller than --clusters {clusters}")
        return min(args.sample, n)
    cap = max(clusters, SAMPLE_BYTES // (4 * dim))
    return min(n, cap, max(SAMPLE_PER_CLUSTER * clusters, MIN_SAMPLE))


def _sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """``size`` distinct row numbers of ``n``, sorted, the same on every rerun."""
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def _run_pipeline(label: str, transform, options, test_pipeline) -> tuple[str, float]:
    """Run one transform as the whole pipeline; returns (runner name, seconds)."""
    pipeline = test_pipeline if test_pipeline is not None else beam.Pipeline(options=options)
    _ = pipeline | label >> transform
    start = time.perf_counter()
    result = pipeline.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - start
    client = getattr(result, "client", None)  # the Dask runner leaves its client open
    if client is not None:
        client.close()
    # A TestPipeline is given its runner directly rather than through the options.
    runner = type(pipeline.runner).__name__ if test_pipeline is not None else runner_name(options)
    return runner, seconds


def _clustered(args, settings, blocking: Blocking, scan: Scan, options, test_pipeline, seconds):
    """Exact truth for the sample queries, blocks, the blocked search, its recall.

    Returns ``(manifest details, runner name, recall or None)``.
    """
    start = time.perf_counter()
    k, n = args.k, scan.count
    tune_rows, _, tune_queries = scan.picked["tune"]
    recall_rows, recall_ids, recall_queries = scan.picked["recall"]
    truth = SampleTruth(
        np.concatenate([tune_queries, recall_queries]), np.concatenate([tune_rows, recall_rows]), k
    )
    for ids, vectors in settings.reader.batches():
        truth.add(ids, vectors)
    true_ids, true_scores = truth.result()
    seconds["exact_sample"] = time.perf_counter() - start

    start = time.perf_counter()
    tuning = None
    if len(tune_rows):
        tuning = Tuning(
            tune_queries, truth.neighbor_vectors()[: len(tune_rows)], args.target_recall
        )
    _, _, sample = scan.picked["fit"]
    plan: BlockPlan = plan_blocks(
        sample,
        n,
        blocking.clusters,
        max_block=blocking.max_block,
        nprobe=blocking.nprobe,
        tuning=tuning,
        seed=args.seed,
        iterations=args.iterations,
        precision=args.precision,
    )
    centroids_path = join(args.output, CENTROIDS)
    save_centroids(centroids_path, plan.centroids)
    seconds["fit"] = time.perf_counter() - start
    logger.info(
        "fitted %d clusters on %d rows (%d split into %d blocks); nprobe %d, predicted recall %s",
        blocking.clusters,
        len(sample),
        plan.split,
        len(plan.centroids),
        plan.nprobe,
        plan.choice.predicted_recall,
    )
    if plan.choice.reached is False and blocking.nprobe is None:
        logger.warning(
            "recall@%d %.3f at nprobe %d is below --target-recall %.3f: more probes would cost "
            "more than a quarter of the exact search; consider --method exact",
            k,
            plan.choice.predicted_recall,
            plan.nprobe,
            args.target_recall,
        )

    n_shards = args.shards or math.ceil(n / ROWS_PER_SHARD)
    groups = group_blocks(
        plan.estimated_sizes, blocking.group_rows, min_groups=min(MIN_GROUPS, len(plan.centroids))
    )
    transform = ClusterBlockedPairs(
        settings,
        centroids_path,
        nprobe=plan.nprobe,
        groups=groups,
        n_shards=n_shards,
        max_block=blocking.max_block,
    )
    runner, seconds["pipeline"] = _run_pipeline(
        "ClusterBlockedPairs", transform, options, test_pipeline
    )
    recall = None
    if len(recall_rows):
        table = read_neighbors(args.output, recall_ids)
        found = {row["id"]: (row["neighbor_ids"], row["scores"]) for row in table.to_pylist()}
        recall = recall_at_k(
            [found[i][0] for i in recall_ids],
            [found[i][1] for i in recall_ids],
            true_ids[len(tune_rows) :],
            true_scores[len(tune_rows) :],
            k,
        )
    reports = read_reports(args.output)
    sizes = np.array([size for report in reports for _, size in report["blocks"]], np.int64)
    details = {
        "clusters": blocking.clusters,
        "nprobe": plan.nprobe,
        "nprobe_requested": blocking.nprobe,
        "target_recall": args.target_recall if blocking.nprobe is None else None,
        "max_block": blocking.max_block,
        "sample": {"requested": args.sample, "used": len(sample)},
        "tuning_queries": len(tune_rows),
        **plan.describe(),
        "blocks": {
            "searched": len(sizes),
            "largest": int(sizes.max()) if len(sizes) else 0,
            "mean": float(sizes.mean()) if len(sizes) else 0.0,
            "over_cap": int(np.sum(sizes > blocking.max_block)),
            "vectors_searched": int(sizes.sum()),
        },
        "block_groups": int(groups.max()) + 1,
        "output_shards": n_shards,
        "short_lists": sum(report["short_lists"] for report in reports),
    }
    return details, runner, recall


def _known_pairs(path: str, output: str, threshold: float | None) -> dict:
    """How many pairs of a known list (id_a, id_b) the output found."""
    with FileSystems.open(path) as handle:
        known = pq.read_table(handle)
    missing = {"id_a", "id_b"} - set(known.column_names)
    if missing:
        raise ValueError(f"--known-pairs {path}: no column {', '.join(sorted(missing))}")
    a = known["id_a"].to_pylist()
    b = known["id_b"].to_pylist()
    table = read_neighbors(output, set(a) | set(b))
    lists = {row["id"]: set(row["neighbor_ids"]) for row in table.to_pylist()}
    present = [(x, y) for x, y in zip(a, b, strict=True) if x in lists and y in lists]
    in_lists = sum(1 for x, y in present if y in lists[x] or x in lists[y])
    result = {
        "file": path,
        "pairs": len(a),
        "unknown_ids": len(a) - len(present),
        "in_neighbors": in_lists,
        "recall_in_neighbors": in_lists / len(present) if present else None,
    }
    if threshold is not None:
        found = read_pairs(output)
        keys = set(zip(found["id_a"].to_pylist(), found["id_b"].to_pylist(), strict=True))
        in_pairs = sum(1 for x, y in present if (min(x, y), max(x, y)) in keys)
        result["in_pairs"] = in_pairs
        result["recall_in_pairs"] = in_pairs / len(present) if present else None
    return result


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
        **{field: first[field] for field in MODEL_FIELDS if field in first},
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
        "software": {"sbert_pipeline": __version__, "apache_beam": beam.__version__},
        "seconds": round(summary.seconds, 3),
        "seconds_parts": {name: round(value, 3) for name, value in seconds.items()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run and print the summary."""
    summary = run(argv)
    print(summary.line())
    return 0
