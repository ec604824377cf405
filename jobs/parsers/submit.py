"""Options of ``sbert submit`` (the job is ``jobs/submit.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from jobs.parsers import command_parser


def build_parser() -> argparse.ArgumentParser:
    """Options of ``sbert submit`` itself."""
    parser = command_parser("sbert submit", "jobs.submit")
    parser.add_argument("config", help="job config YAML (see deploy/)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one value, e.g. --set args.output=gs://bucket/out (repeatable)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the command line instead of running it"
    )
    return parser
