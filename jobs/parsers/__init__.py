"""The command-line parsers of the jobs, in modules that import no torch and no Beam.

``sbert CMD --help`` and the option checks before a job starts build a parser from here, so they
take a fraction of a second; the job module (``jobs/CMD.py``) imports the heavy libraries only
when the job runs, and re-exports its parser's ``build_parser``.

Help is laid out at a fixed width (:data:`HELP_COLUMNS`), whatever the terminal, so it reads the
same everywhere and its length is stable; descriptions are written for users in the parsers
(never taken from a module's docstring).
"""

from __future__ import annotations

import argparse
import re
import textwrap

from sbert_pipeline.stage_api.flag_recording import FlagRecording

# The width help is laid out for (argparse keeps two columns free, as for a terminal).
HELP_COLUMNS = 100
# Where an option's help starts when its flags are short enough.
HELP_POSITION = 30
# Sphinx/reStructuredText markup in docstrings, shown as plain text in --help.
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc):`~?(?:[\w.]+\.)?([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


class HelpFormatter(argparse.HelpFormatter):
    """Help at :data:`HELP_COLUMNS` columns; each paragraph of a description wrapped on its own
    (indented lines, such as examples, kept as written); an on/off option shown as
    ``--[no-]x``."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 0,
                 width: int | None = None) -> None:  # fmt: skip
        super().__init__(prog, indent_increment, HELP_POSITION, HELP_COLUMNS - 2)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            lines = paragraph.splitlines()
            if all(line.startswith(" ") for line in lines):
                paragraphs.append("\n".join(indent + line for line in lines))
            else:
                paragraphs.append(
                    textwrap.fill(
                        " ".join(paragraph.split()),
                        width,
                        initial_indent=indent,
                        subsequent_indent=indent,
                    )
                )
        return "\n\n".join(paragraphs)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if getattr(action, "is_switch", False):  # --x and --no-x, as --[no-]x
            flags = [flag for flag in action.option_strings if not flag.startswith("--no-")]
            return ", ".join(
                f"--[no-]{flag[2:]}" if flag.startswith("--") else flag for flag in flags
            )
        return super()._format_action_invocation(action)


def with_default(action: argparse.Action) -> str | None:
    """``action``'s help with its default appended (``(default: %(default)s)``), unless the
    help already mentions a default, the option is required or positional, or the default is
    ``None``, ``False`` or empty (nothing to show); an on/off option on by default says
    ``(default: on)``."""
    text = action.help
    if text is None or text == argparse.SUPPRESS or "default" in text:
        return text
    if action.required or not action.option_strings:
        return text
    if action.default in (None, False, "", [], (), argparse.SUPPRESS):
        return text
    if action.default is True:
        return f"{text} (default: on)"
    return f"{text} (default: %(default)s)"


def plain_text(doc: str) -> str:
    """``doc`` without reStructuredText markup: ``code`` and :func:`name` become plain words."""
    doc = _ROLE.sub(r"\1", doc)
    return _LITERAL.sub(r"\1", doc)


class CommandParser(FlagRecording, argparse.ArgumentParser):
    """An ``ArgumentParser`` that lists its flags (:attr:`flags`, :attr:`actions`), for the
    close-match hints of an unknown option and the checks of a config against a command, and
    shows each option's default in ``--help`` (:func:`with_default`)."""

    def _record(self, action: argparse.Action) -> argparse.Action:
        action.help = with_default(action)
        return super()._record(action)


def command_parser(prog: str, description: str, usage: str | None = None) -> CommandParser:
    """A job's parser: its description, defaults in the help."""
    return CommandParser(
        prog=prog, description=description, usage=usage, formatter_class=HelpFormatter
    )


def config_parser(
    prog: str, description: str, config_help: str, set_metavar: str, set_help: str
) -> CommandParser:
    """The parser of a command driven by a config YAML (``sbert run``, ``sbert submit``): the
    ``config`` path and repeatable ``--set KEY=VALUE`` overrides (into ``args.overrides``)."""
    parser = command_parser(prog, description, f"{prog} CONFIG [options]")
    parser.add_argument("config", metavar="CONFIG", help=config_help)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar=set_metavar,
        help=set_help,
    )
    return parser
