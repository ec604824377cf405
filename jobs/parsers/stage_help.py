"""The parser of a stage command and its two helps: ``--help`` shows the options users set
often, in their sections, and ``--help-all`` every option. Also the actions the generated flags
use: an on/off switch (``--x/--no-x``) and an old flag that names its new spelling.

Imports no torch and no Beam.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Sequence
from typing import Any

from sbert_pipeline.jobs.parsers import CommandParser, HelpFormatter, plain_text

# The namespace attribute that lists the old flags a command line used: (old flag, new flag).
OLD_FLAGS_USED = "old_flags_used"


class Switch(argparse.Action):
    """An on/off option: ``--x`` sets True, ``--no-x`` False. Given ``old_values``, ``--x`` also
    takes one of them as a value (``--stable-keep off``), converted, with its deprecation
    line, when the options are built."""

    is_switch = True

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        default: Any = None,
        required: bool = False,
        help: str | None = None,
        old_values: Sequence[str] = (),
    ) -> None:
        strings = []
        for flag in option_strings:
            strings.append(flag)
            if flag.startswith("--"):
                strings.append(f"--no-{flag[2:]}")
        self.old_values = tuple(old_values)
        super().__init__(
            strings,
            dest,
            nargs="?" if old_values else 0,
            default=default,
            required=required,
            help=help,
        )

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        negative = option_string is not None and option_string.startswith("--no-")
        if values in (None, []):
            value: Any = not negative
        elif negative or values not in self.old_values:
            parser.error(f"argument {option_string}: an on/off option takes no value")
        else:
            value = values
        setattr(namespace, self.dest, value)

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


def old_flag_action(action: argparse.Action, new_flag: str) -> argparse.Action:
    """``action`` (the hidden action of an old flag) made to note its use in the namespace
    (``OLD_FLAGS_USED``), for the deprecation line, before it does what the new flag does."""
    base = type(action)

    def call(self, parser, namespace, values, option_string=None) -> None:
        new = new_flag
        if str(option_string).startswith("--no-") and not new.startswith("--no-"):
            new = f"--no-{new[2:]}"  # an old switch's negative form
        used = getattr(namespace, OLD_FLAGS_USED, None) or []
        setattr(namespace, OLD_FLAGS_USED, [*used, (option_string, new)])
        base.__call__(self, parser, namespace, values, option_string)

    action.__class__ = type(f"Old{base.__name__}", (base,), {"__call__": call})
    return action


class StageParser(CommandParser):
    """A stage command's parser: ``-h/--help`` leaves out the :attr:`advanced` options and
    says how many there are; ``--help-all`` lists every option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, add_help=False, formatter_class=HelpFormatter, **kwargs)
        self.advanced: set[argparse.Action] = set()
        self.add_argument("-h", "--help", action=_Help, help="show the common options and exit")
        self.add_argument("--help-all", action=_Help, help="show every option and exit")

    def format_help(self, everything: bool = False) -> str:
        formatter = self._get_formatter()
        formatter.add_usage(self.usage, self._actions, self._mutually_exclusive_groups)
        formatter.add_text(self.description)
        for group in self._action_groups:
            shown = [
                action
                for action in group._group_actions
                if action.help != argparse.SUPPRESS and (everything or action not in self.advanced)
            ]
            if not shown:
                continue
            formatter.start_section(group.title)
            formatter.add_text(group.description)
            formatter.add_arguments(shown)
            formatter.end_section()
        hidden = len(self.advanced)
        if hidden and not everything:
            formatter.add_text(f"{hidden} more options: --help-all lists every option.")
        return formatter.format_help()


class _Help(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0,
                         help=help)  # fmt: skip

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        sys.stdout.write(parser.format_help(everything=option_string == "--help-all"))
        parser.exit()


def description(options_type: type, command: str) -> str:
    """A stage command's description: its ``Options`` docstring (written for users), then where
    to read more: the command's entry in docs/commands.md and the stage's ``DOCS`` pages."""
    doc = plain_text(inspect.cleandoc(options_type.__doc__ or ""))
    pages = [f"docs/commands.md#{command}", *getattr(options_type, "DOCS", ())]
    return f"{doc}\n\nMore: {', '.join(pages)}"


def usage(prog: str, required: Sequence[str], beam: bool) -> str:
    """``prog``, its required options and positional arguments, then ``[options]``."""
    parts = [prog, *required, "[options]"]
    if beam:
        parts.append("[Beam options]")
    return " ".join(parts)
