"""Options of ``sbert run`` (the job is ``jobs/run.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from sbert_pipeline.jobs.parsers import config_parser
from sbert_pipeline.jobs.parsers.stage_help import Switch
from sbert_pipeline.jobs.run_table import (
    STAGE_NAMES as STAGE_ORDER,  # the stage table loads no Beam or torch
)

DESCRIPTION = """Run a whole job from one config: the stages it lists, one after the other, each
writing its folder in the job directory, then report.html. The config is checked whole before
anything is written. A rerun skips every stage whose inputs and settings did not change; a
failed stage leaves its previous output as it was.

    sbert run examples/quickstart.yaml

More: docs/commands.md#run, docs/incremental.md, docs/troubleshooting.md"""


def build_parser() -> argparse.ArgumentParser:
    """Options of ``sbert run``."""
    parser = config_parser(
        "sbert run",
        DESCRIPTION,
        "job config YAML (see examples/quickstart.yaml)",
        "KEY=VALUE",
        "override a config value, e.g. --set dedup.threshold=0.95 (repeatable)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        choices=STAGE_ORDER,
        help="run only this stage (repeatable), on the outputs already in the job directory",
    )
    parser.add_argument(
        "--force",
        action="append",
        default=[],
        choices=[*STAGE_ORDER, "all"],
        help="rerun this stage even if nothing changed (repeatable; 'all' for every stage)",
    )
    parser.add_argument(
        "--print-config",
        action=Switch,
        default=False,
        help="print the effective config (after --set) as YAML and exit",
    )
    return parser
