"""Options of ``sbert submit`` (the job is ``jobs/submit.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from sbert_pipeline.jobs.parsers import config_parser
from sbert_pipeline.jobs.parsers.stage_help import Switch

DESCRIPTION = """Run one stage that uses Beam pipelines (embed, index, cluster, pairs) from a YAML
config that names the stage, its options (args:) and Beam's pipeline options (beam:): the way to
reach Dataflow, Spark and Flink. ${VAR} is replaced by the environment variable VAR; every
option is checked before the job is submitted.

    sbert submit deploy/dataflow/embed-gpu.yaml --set args.output=gs://bucket/out --dry-run

More: docs/commands.md#submit, docs/distributed.md"""


def build_parser() -> argparse.ArgumentParser:
    """Options of ``sbert submit`` itself."""
    parser = config_parser(
        "sbert submit",
        DESCRIPTION,
        "job config YAML (see deploy/)",
        "SECTION.KEY=VALUE",
        "override one value, e.g. --set args.output=gs://bucket/out (repeatable)",
    )
    parser.add_argument(
        "--dry-run",
        action=Switch,
        default=False,
        help="print the command line instead of running it",
    )
    return parser
