"""Options of ``sbert index`` (the job is ``jobs/index.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from jobs.job_options import add_external_vectors, add_overwrite, add_seed, add_verify
from jobs.parsers import command_parser


def build_parser() -> argparse.ArgumentParser:
    """Job options; anything not listed here is passed on to Beam's ``PipelineOptions``."""
    parser = command_parser("sbert index", "jobs.index")
    parser.add_argument(
        "--embeddings",
        required=True,
        help="an sbert embed output directory (or, with --embedding-column, a Parquet dataset)",
    )
    add_external_vectors(parser)
    parser.add_argument("--output", required=True, help="index output directory")
    parser.add_argument(
        "--factory",
        default="auto",
        help="'auto' (choose under --memory-budget) or a FAISS index_factory string",
    )
    parser.add_argument(
        "--memory-budget",
        default="4GB",
        help="memory the index may use, e.g. 4GB, 512MiB (default 4GB; used by auto)",
    )
    parser.add_argument(
        "--target-recall",
        type=float,
        default=0.95,
        help="recall@10 the search parameter is tuned to reach (default 0.95)",
    )
    parser.add_argument(
        "--metric",
        default="ip",
        choices=["ip", "l2"],
        help="ip: cosine (vectors are L2-normalised), l2: Euclidean (default ip)",
    )
    parser.add_argument(
        "--train-sample", type=int, default=None, help="training vectors (default: by index)"
    )
    parser.add_argument(
        "--trial-sample",
        type=int,
        default=None,
        help="with --factory auto, when both HNSW and IVF-Flat fit the budget, build both on "
        "this many vectors and keep the faster at the target recall (default: N/4, at least "
        "100k, at most 1M; 0: take the planner's first choice)",
    )
    parser.add_argument(
        "--queries",
        type=int,
        default=1000,
        help="held-out vectors for tuning and the recall estimate (default 1000)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=65536, help="vectors read and added per step"
    )
    add_seed(parser, "for the training and query sample")
    parser.add_argument(
        "--shards",
        type=int,
        default=None,
        help="fill S shards in a Beam pipeline and merge them (default: one process, no Beam)",
    )
    add_overwrite(parser)
    add_verify(parser)
    return parser
