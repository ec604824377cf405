"""Options of ``sbert finetune`` (the job is ``jobs/finetune.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from jobs.parsers import command_parser


def build_parser() -> argparse.ArgumentParser:
    """Options of ``sbert finetune``."""
    parser = command_parser("sbert finetune", "jobs.finetune")
    parser.add_argument("--config", default=None, help="YAML or JSON config (FinetuneConfig)")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="override config values, e.g. training.epochs=4 train.limit=500",
    )
    parser.add_argument("--model", default=None, help="base model (overrides the config)")
    parser.add_argument("--output", default=None, help="output directory (overrides the config)")
    parser.add_argument("--overwrite", action="store_true", default=None, help="replace OUTPUT")
    parser.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="continue from the newest checkpoint in OUTPUT.checkpoints (default: yes)",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the resolved config as YAML and exit"
    )
    return parser
