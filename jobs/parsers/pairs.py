"""Options of ``sbert pairs`` (the job is ``jobs/pairs.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from jobs.job_options import (
    add_embeddings_inputs,
    add_external_vectors,
    add_kmeans_fit,
    add_overwrite,
    add_precision,
    add_seed,
    add_verify,
)
from jobs.parsers import command_parser
from pipelines.pairs.plan import (
    DEFAULT_MAX_BLOCK,
    MIN_SAMPLE,
    ROWS_PER_RANGE,
    ROWS_PER_SHARD,
    SAMPLE_PER_CLUSTER,
    TUNE_SAMPLE,
)


def build_parser() -> argparse.ArgumentParser:
    """Job options; anything not listed here is passed on to Beam's ``PipelineOptions``."""
    parser = command_parser("sbert pairs", "jobs.pairs")
    add_external_vectors(parser)
    add_embeddings_inputs(parser, "searched")
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
    add_kmeans_fit(parser, "clustered: ", SAMPLE_PER_CLUSTER, MIN_SAMPLE)
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
    add_seed(parser, "k-means and recall sample seed")
    add_precision(
        parser, "candidate pass of the exact search; results are the fp32 answer either way"
    )
    add_overwrite(parser)
    add_verify(parser)
    return parser
