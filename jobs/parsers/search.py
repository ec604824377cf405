"""Options of ``sbert search`` (the job is ``jobs/search.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from jobs.job_options import add_verify
from jobs.model_options import add_model_arguments
from jobs.parsers import command_parser


def build_parser() -> argparse.ArgumentParser:
    """Search options."""
    parser = command_parser("sbert search", "jobs.search")
    parser.add_argument("query", nargs="*", help="query texts (or use --queries FILE)")
    parser.add_argument("--index", required=True, help="an sbert index output directory")
    parser.add_argument(
        "--queries",
        default=None,
        help="UTF-8 file with one query per line (blank lines are skipped)",
    )
    parser.add_argument("--output", default=None, help="write hits to FILE.jsonl or FILE.tsv")
    parser.add_argument("--k", type=int, default=10, help="neighbours per query (default 10)")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    add_verify(parser, "the index files")
    add_model_arguments(parser, query_only=True)
    return parser
