"""Options of ``sbert submit`` (the job is ``jobs/submit.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from sbert_pipeline.jobs.parsers import config_parser


def build_parser() -> argparse.ArgumentParser:
    """Options of ``sbert submit`` itself."""
    parser = config_parser(
        "sbert submit",
        "sbert_pipeline.jobs.submit",
        "job config YAML (see deploy/)",
        "SECTION.KEY=VALUE",
        "override one value, e.g. --set args.output=gs://bucket/out (repeatable)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the command line instead of running it"
    )
    return parser
