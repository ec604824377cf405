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
import pkgutil
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from sbert_pipeline.jobs.options_cli import build_options_parser, parse_options
from sbert_pipeline.jobs.parsers import CommandParser
from sbert_pipeline.stage_api.options import BEAM_FIELD


def is_stage_command(name: str) -> bool:
    """Whether ``sbert <name>`` is a stage package's: ``pipelines.<name>`` exports ``Options``
    (from its ``options.py``) and ``run``."""
    spec = importlib.util.find_spec(f"sbert_pipeline.{name}") if name.isidentifier() else None
    if spec is None:
        return False
    # Looked up on disk: finding a submodule's spec would import the package (a package that is
    # not a stage, such as the in-memory API, may load Beam or torch, which --help must not).
    places = spec.submodule_search_locations or []
    if not any(Path(place, "options.py").is_file() for place in places):
        return False
    package = stage_package(name)
    return hasattr(package, "Options") and hasattr(package, "run")


def stage_commands() -> dict[str, str]:
    """Every stage package's command -> its ``SUMMARY`` (its line in ``sbert --help``)."""
    import sbert_pipeline

    names = sorted(info.name for info in pkgutil.iter_modules(sbert_pipeline.__path__))
    return {name: stage_package(name).SUMMARY for name in names if is_stage_command(name)}


def runs_pipelines(name: str) -> bool:
    """Whether ``sbert <name>`` takes Beam options (its ``Options`` has ``beam_options``)."""
    if not is_stage_command(name):
        return False
    return BEAM_FIELD in {item.name for item in dataclasses.fields(stage_package(name).Options)}


def stage_package(stage: str) -> ModuleType:
    """``pipelines.<stage>``: its ``Options`` and ``run``."""
    return importlib.import_module(f"sbert_pipeline.{stage}")


def build_parser(stage: str) -> CommandParser:
    """The parser of ``sbert <stage>``, its description the docstring of the stage's
    ``Options``."""
    return build_options_parser(stage_package(stage).Options, f"sbert {stage}")


def parse(stage: str, argv: Sequence[str] | None) -> Any:
    """``argv`` as the stage's ``Options`` (flags it does not know: its Beam options).

    Raises:
        SystemExit: a usage error (argparse's message).
        OptionError: a value the stage refuses, naming the flag.
    """
    options_type = stage_package(stage).Options
    return parse_options(options_type, argv, f"sbert {stage}")


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
