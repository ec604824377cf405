"""Options of ``sbert dedup`` (the job is ``jobs/dedup.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from jobs.job_options import add_seed, add_verify
from jobs.parsers import command_parser
from pipelines.dedup.choices import (
    DEFAULT_METHOD,
    DEFAULT_MUTUAL_K,
    DEFAULT_RADIUS_GAP,
    DEFAULT_RANK,
    KEEP_POLICIES,
    KNOWN_FIELD,
    LABEL_COLUMN,
    LABEL_ID_A,
    LABEL_ID_B,
    METHODS,
    NO_KNOWN_FIELD,
    RANKINGS,
)
from sbert_core.tabular import FORMATS


def build_parser() -> argparse.ArgumentParser:
    """Job options (dedup runs in this process; it takes no pipeline options)."""
    parser = command_parser("sbert dedup", "jobs.dedup")
    parser.add_argument("--pairs", required=True, help="an sbert pairs output directory")
    parser.add_argument("--output", default=None, help="output directory (not with --dry-run)")
    parser.add_argument(
        "--threshold", type=float, required=True, help="cosine at or above which pairs join"
    )
    parser.add_argument(
        "--method",
        default=DEFAULT_METHOD,
        choices=METHODS,
        help=f"how pairs become groups (default: {DEFAULT_METHOD}: it does not chain; "
        "components chains as corpora grow, see the description above)",
    )
    parser.add_argument(
        "--keep",
        default=None,
        choices=KEEP_POLICIES,
        help="components: which member of a group is kept (default: first); the other methods "
        "read it as --rank (first: corpus)",
    )
    parser.add_argument(
        "--rank",
        default=None,
        help=f"the other methods: which member is kept, one of {', '.join(RANKINGS)} "
        f"(default: {DEFAULT_RANK})",
    )
    add_seed(parser, "seed of --rank random")
    parser.add_argument(
        "--radius",
        type=float,
        default=None,
        help=f"star, split: the least score of a member with its representative (default: "
        f"T - {DEFAULT_RADIUS_GAP:g}, not below the pairs' threshold; the sweep keeps the gap)",
    )
    parser.add_argument(
        "--mutual-k",
        type=int,
        default=DEFAULT_MUTUAL_K,
        help=f"mutual: neighbours per item (default: {DEFAULT_MUTUAL_K})",
    )
    parser.add_argument(
        "--missing-score",
        type=float,
        default=0.0,
        help="average: the score of a pair that is not loaded (default: 0)",
    )
    parser.add_argument(
        "--labels",
        default=None,
        help="labelled pairs (TSV, CSV, JSONL, Parquet; .gz): two id columns and a 0/1 label; "
        "P/R/F1 of every method at every sweep threshold",
    )
    parser.add_argument("--label-id-a", default=LABEL_ID_A, help=f"first id column ({LABEL_ID_A})")
    parser.add_argument("--label-id-b", default=LABEL_ID_B, help=f"second id column ({LABEL_ID_B})")
    parser.add_argument(
        "--label-column", default=LABEL_COLUMN, help=f"0/1 label column ({LABEL_COLUMN})"
    )
    parser.add_argument(
        "--skip-unknown-labels",
        action="store_true",
        help="leave out (and count) labelled pairs naming ids that were not embedded",
    )
    parser.add_argument(
        "--target-precision",
        type=float,
        default=None,
        help="with --labels: also find the threshold of highest recall with precision >= P",
    )
    parser.add_argument(
        "--known-duplicates-field",
        default=None,
        metavar="FIELD",
        help=f"a field the embeddings kept (sbert embed --keep-fields) that names, on a "
        f"duplicate's row, the id of the row it duplicates; the report and the manifest give "
        f"how many of these pairs each method put in one group (default: {KNOWN_FIELD} "
        f"when the embeddings kept it, else the labelled duplicates of --labels; "
        f"{NO_KNOWN_FIELD}: off)",
    )
    parser.add_argument(
        "--corpus",
        default=None,
        help="glob of the corpus the embeddings were made from: the corpus order for --keep "
        "first, texts for --keep longest and the report, and the rows --apply writes",
    )
    parser.add_argument(
        "--apply", action="store_true", help="write the deduplicated corpus (needs --corpus)"
    )
    parser.add_argument(
        "--id-field", default=None, help="corpus id field (default: as the embed job read it)"
    )
    parser.add_argument(
        "--text-field", default=None, help="corpus text field (default: as the embed job)"
    )
    parser.add_argument(
        "--format", default=None, choices=FORMATS, help="corpus format (default: as the embed job)"
    )
    parser.add_argument(
        "--embeddings",
        nargs="+",
        default=None,
        help="the embeddings the pairs were computed from, if they moved since (default: as "
        "named in the pairs manifest)",
    )
    parser.add_argument("--sweep-from", type=float, default=0.80, help="lowest sweep threshold")
    parser.add_argument("--sweep-to", type=float, default=0.99, help="highest sweep threshold")
    parser.add_argument("--sweep-step", type=float, default=0.01, help="sweep step")
    parser.add_argument(
        "--report-groups", type=int, default=50, help="largest groups shown in report.html"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the threshold sweep only; write nothing"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    add_verify(parser, "the pairs' and the embeddings' files")
    return parser
