"""The command-line parsers of the jobs, in modules that import no torch and no Beam.

``sbert CMD --help`` and the option checks before a job starts build a parser from here, so they
take a fraction of a second; the job module (``jobs/CMD.py``) imports the heavy libraries only
when the job runs, and re-exports its parser's ``build_parser``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
from pathlib import Path

from sbert_pipeline.stage_api.flag_recording import FlagRecording

# Sphinx/reStructuredText markup in docstrings, shown as plain text in --help.
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc):`~?(?:[\w.]+\.)?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


# Descriptions kept as written (docstrings are laid out by hand).
HelpFormatter = argparse.RawDescriptionHelpFormatter


def with_default(action: argparse.Action) -> str | None:
    """``action``'s help with its default appended (``(default: %(default)s)``), unless the
    help already mentions a default, the option is required or positional, or the default is
    ``None``, ``False`` or empty (nothing to show)."""
    text = action.help
    if text is None or text == argparse.SUPPRESS or "default" in text:
        return text
    if action.required or not action.option_strings:
        return text
    if action.default in (None, False, "", [], (), argparse.SUPPRESS):
        return text
    return f"{text} (default: %(default)s)"


def plain_text(doc: str) -> str:
    """``doc`` without reStructuredText markup: ``code`` and :func:`name` become plain words."""
    doc = _ROLE.sub(r"\1", doc)
    doc = _LITERAL.sub(r"\1", doc)
    doc = re.sub(r"::$", ":", doc, flags=re.MULTILINE)
    return doc.replace("DESIGN.md", "docs/architecture.md")


def module_description(module: str) -> str | None:
    """The docstring of ``module`` as plain text, read from its source without importing it
    (importing a job module loads torch and Beam); ``None`` when the source is not available."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    doc = ast.get_docstring(ast.parse(Path(spec.origin).read_text(encoding="utf-8")), clean=False)
    return None if doc is None else plain_text(doc)


class CommandParser(FlagRecording, argparse.ArgumentParser):
    """An ``ArgumentParser`` that lists its flags (:attr:`flags`, :attr:`actions`), for the
    close-match hints of an unknown option and the checks of a config against a command, and
    shows each option's default in ``--help`` (:func:`with_default`)."""

    def _record(self, action: argparse.Action) -> argparse.Action:
        action.help = with_default(action)
        return super()._record(action)


def command_parser(prog: str, module: str) -> CommandParser:
    """A job's parser: ``module``'s docstring as the description, defaults in the help."""
    return CommandParser(
        prog=prog, description=module_description(module), formatter_class=HelpFormatter
    )


def config_parser(
    prog: str, module: str, config_help: str, set_metavar: str, set_help: str
) -> CommandParser:
    """The parser of a command driven by a config YAML (``sbert run``, ``sbert submit``): the
    ``config`` path and repeatable ``--set KEY=VALUE`` overrides (into ``args.overrides``)."""
    parser = command_parser(prog, module)
    parser.add_argument("config", help=config_help)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar=set_metavar,
        help=set_help,
    )
    return parser
