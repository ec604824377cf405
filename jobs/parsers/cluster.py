"""Options of ``sbert cluster`` (the job is ``jobs/cluster.py``); imports no torch and no Beam."""

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

# The k-means fit's sample: rows per cluster, and at least this many rows.
SAMPLE_PER_CLUSTER = 64
MIN_SAMPLE = 20_000


def build_parser() -> argparse.ArgumentParser:
    """Job options; anything not listed here is passed on to Beam's ``PipelineOptions``."""
    parser = command_parser("sbert cluster", "jobs.cluster")
    add_external_vectors(parser)
    add_embeddings_inputs(parser, "clustered")
    parser.add_argument("--method", default="kmeans", choices=["kmeans", "communities"])
    parser.add_argument("--k", type=int, default=None, help="number of clusters (kmeans)")
    add_kmeans_fit(parser, "", SAMPLE_PER_CLUSTER, MIN_SAMPLE)
    parser.add_argument(
        "--refine-passes",
        type=int,
        default=0,
        help="Lloyd passes over all rows after the sample fit (each reads the input once)",
    )
    add_seed(parser, "random seed (sample and seeding)")
    add_precision(
        parser, "candidate search of the assignment; labels are the fp32 nearest centroid anyway"
    )
    parser.add_argument(
        "--text-from",
        default=None,
        help="where texts for the summaries come from: an embeddings directory written with "
        "--keep-text, or the corpus glob the embeddings were made from (default: the inputs' "
        "text column when they have one)",
    )
    parser.add_argument(
        "--threshold", type=float, default=0.75, help="communities: minimum cosine to the centre"
    )
    parser.add_argument(
        "--min-size", type=int, default=10, help="communities: smallest community (with centre)"
    )
    parser.add_argument(
        "--neighbors",
        type=int,
        default=64,
        help="communities: neighbour-list length (larger communities are completed by a "
        "threshold search)",
    )
    parser.add_argument(
        "--block-size", type=int, default=1024, help="communities: query rows per similarity block"
    )
    parser.add_argument(
        "--representatives", type=int, default=5, help="members nearest the centre listed"
    )
    parser.add_argument("--terms", type=int, default=8, help="distinctive terms per cluster")
    add_overwrite(parser)
    add_verify(parser)
    return parser
