"""``sbert <stage>`` for every stage package: its parser generated from the stage's
``Options``, its run through ``pipelines.<stage>.run``, its one-line summary printed.

A stage package needs nothing here: ``pipelines/<stage>/options.py`` makes ``sbert <stage>``.
Parsing loads no torch, Beam or FAISS (``pipelines.<stage>`` imports its ``Options`` only); the
stage's heavy modules load when it runs.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from jobs.options_cli import build_options_parser, parse_options
from jobs.parsers import CommandParser
from pipelines.stage_api.options import BEAM_FIELD


def is_stage_command(name: str) -> bool:
    """Whether ``sbert <name>`` is a stage package's (``pipelines.<name>.options`` exists)."""
    return importlib.util.find_spec(f"pipelines.{name}") is not None and (
        importlib.util.find_spec(f"pipelines.{name}.options") is not None
    )


def runs_pipelines(name: str) -> bool:
    """Whether ``sbert <name>`` takes Beam options (its ``Options`` has ``beam_options``)."""
    if not is_stage_command(name):
        return False
    return BEAM_FIELD in {item.name for item in dataclasses.fields(stage_package(name).Options)}


def stage_package(stage: str) -> ModuleType:
    """``pipelines.<stage>``: its ``Options`` and ``run``."""
    return importlib.import_module(f"pipelines.{stage}")


def build_parser(stage: str) -> CommandParser:
    """The parser of ``sbert <stage>``, its description the stage module's docstring."""
    return build_options_parser(
        stage_package(stage).Options, f"sbert {stage}", f"pipelines.{stage}.stage"
    )


def parse(stage: str, argv: Sequence[str] | None) -> Any:
    """``argv`` as the stage's ``Options`` (flags it does not know: its Beam options).

    Raises:
        SystemExit: a usage error (argparse's message).
        OptionError: a value the stage refuses, naming the flag.
    """
    options_type = stage_package(stage).Options
    return parse_options(options_type, argv, f"sbert {stage}", f"pipelines.{stage}.stage")


def run_command(stage: str, argv: Sequence[str] | None, *, pipeline: Any = None) -> Any:
    """Run ``sbert <stage> ARGV``; returns the stage's ``Result``."""
    return stage_package(stage).run(parse(stage, argv), pipeline=pipeline)


def main(stage: str, argv: Sequence[str] | None) -> int:
    """CLI entry: run and print the one-line summary (a stage with nothing to say, such as a
    training process other than the first, prints nothing)."""
    line = run_command(stage, argv).line()
    if line:
        print(line)
    return 0
