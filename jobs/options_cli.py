"""A stage's command line, generated from its ``Options`` (``pipelines/stage_api/options.py``).

One flag per field, named as the field with dashes (``memory_budget`` is ``--memory-budget``),
plus the field's old spellings (``aliases``). The type gives the argparse settings: a bool is a
switch (``--verify/--no-verify`` where it is on by default or may be None), a ``Literal`` gives
the choices, an int or float its type, a ``tuple[...]`` takes several values; a field's ``cli``
metadata changes what differs (``{"positional": True, "nargs": "*"}`` makes a positional
argument). Every flag a stage does not know is a Beam pipeline option
(its ``beam_options`` field) in a stage that runs pipelines, and an error otherwise.

Imports no torch and no Beam, so ``sbert CMD --help`` answers at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

from sbert_pipeline.jobs.parsers import command_parser
from sbert_pipeline.stage_api.options import BEAM_FIELD, StageOptions, field_types


def cli_fields(options_type: type[StageOptions]) -> list[dataclasses.Field]:
    """The fields of ``options_type`` that have a flag."""
    return [item for item in dataclasses.fields(options_type) if item.metadata.get("in_cli", True)]


def flag_of(name: str) -> str:
    """The flag of field ``name``: ``memory_budget`` -> ``--memory-budget``."""
    return f"--{name.replace('_', '-')}"


def build_options_parser(
    options_type: type[StageOptions], prog: str, module: str
) -> argparse.ArgumentParser:
    """The parser of a stage command: ``module``'s docstring, a flag per field of
    ``options_type`` (grouped as the fields say), defaults shown in ``--help``."""
    parser = command_parser(prog, module)
    groups: dict[str, Any] = {}
    hints = field_types(options_type)
    for item in cli_fields(options_type):
        group_name = item.metadata.get("group")
        target: Any = parser
        if group_name:
            if group_name not in groups:
                groups[group_name] = parser.add_argument_group(group_name)
            if item.metadata.get("group_help"):
                groups[group_name].description = item.metadata["group_help"]
            target = groups[group_name]
        settings = argparse_settings(item, hints[item.name])
        if settings.pop("positional", False):
            target.add_argument(item.name, **settings)
            continue
        flags = [flag_of(item.name), *item.metadata.get("aliases", ())]
        target.add_argument(*flags, dest=item.name, **settings)
    return parser


def argparse_settings(item: dataclasses.Field, hint: Any) -> dict[str, Any]:
    """The ``add_argument`` keywords of the field ``item`` of type ``hint``."""
    meta = item.metadata
    overrides = dict(meta.get("cli", {}))
    negatable = overrides.pop("negatable", False)
    # argparse formats help with %-style (``%(default)s``); an option's help is plain text, also
    # shown in the YAML docs, so a literal percent sign ("80% of ...") is escaped here.
    help_text = meta.get("help", "").replace("%", "%%")
    settings: dict[str, Any] = {"help": help_text, "default": item.default}
    if meta.get("metavar"):
        settings["metavar"] = meta["metavar"]
    if meta.get("required"):
        settings["required"] = True
    base, optional = _unwrap(hint)
    if base is bool:
        if negatable or optional or item.default is True:
            settings["action"] = argparse.BooleanOptionalAction
        else:
            settings["action"] = "store_true"
        settings.pop("metavar", None)
    elif get_origin(base) is Literal:
        choices = list(get_args(base))
        settings["choices"] = choices
        settings["type"] = type(choices[0])
    elif get_origin(base) is tuple:
        settings["nargs"] = "+"
        settings["action"] = "extend"
        settings["default"] = list(item.default or ())
        (item_type, *_) = get_args(base) or (str,)
        if item_type in (int, float):
            settings["type"] = item_type
    elif base in (int, float):
        settings["type"] = base
    if "type" in overrides and settings.get("action") == "extend" and "nargs" not in overrides:
        # A comma-separated value parsed into a list: one value that replaces the default.
        settings.pop("action")
        settings.pop("nargs")
    settings.update(overrides)
    return settings


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """(the type without ``| None``, whether None was allowed)."""
    if get_origin(hint) in (typing.Union, types.UnionType):
        arms = [arm for arm in get_args(hint) if arm is not type(None)]
        optional = len(arms) < len(get_args(hint))
        if len(arms) == 1:
            return arms[0], optional
        return hint, optional
    return hint, False


def parse_options(
    options_type: type[StageOptions],
    argv: Sequence[str] | None,
    prog: str,
    module: str,
) -> StageOptions:
    """``argv`` as ``options_type``: its flags, and any others as its Beam options.

    Raises:
        SystemExit: argparse's usage error (a missing required flag, a bad choice or type), or
            an unknown flag in a stage that runs no pipeline.
        OptionError: a value the stage refuses, naming the flag.
    """
    parser = build_options_parser(options_type, prog, module)
    args, rest = parser.parse_known_args(argv)
    values = {item.name: getattr(args, item.name) for item in cli_fields(options_type)}
    names = {item.name for item in dataclasses.fields(options_type)}
    if BEAM_FIELD in names:
        values[BEAM_FIELD] = tuple(rest)
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return options_type(**values)


def options_flags(options_type: type[StageOptions], values: Mapping[str, Any]) -> list[str]:
    """``values`` (field name -> value, as in a config) as the command line of
    ``options_type``: what ``sbert submit`` hands a job that runs on a worker.

    None leaves a flag out, a bool is the flag or its ``--no-`` form, a list is the flag and its
    values (joined with commas where the flag parses one comma-separated value); a positional
    field's values come last.

    Raises:
        ValueError: a key that is no option of the stage.
    """
    by_name = {item.name: item for item in cli_fields(options_type)}
    hints = field_types(options_type)
    argv: list[str] = []
    positional: list[str] = []
    for key, value in values.items():
        name = str(key).replace("-", "_")
        item = by_name.get(name)
        if item is None:
            raise ValueError(f"{key}: not an option of this stage")
        if value is None:
            continue
        flag = flag_of(name)
        settings = argparse_settings(item, hints[name])
        if settings.get("positional"):
            items = value if isinstance(value, list | tuple) else [value]
            positional += [str(one) for one in items]
        elif isinstance(value, bool):
            if value:
                argv.append(flag)
            elif settings.get("action") is argparse.BooleanOptionalAction:
                argv.append(f"--no-{flag[2:]}")
        elif isinstance(value, list | tuple):
            if settings.get("nargs") == "+":
                argv += [flag, *map(str, value)] if value else []
            else:
                argv.append(f"{flag}={','.join(map(str, value))}")
        else:
            argv.append(f"{flag}={value}")
    return argv + positional


def switch_flags(options_type: type[StageOptions]) -> dict[str, str | None]:
    """Every on/off flag of ``options_type`` (its aliases too) -> its ``--no-`` form, or None
    where it has none (a plain switch)."""
    hints = field_types(options_type)
    switches: dict[str, str | None] = {}
    for item in cli_fields(options_type):
        settings = argparse_settings(item, hints[item.name])
        action = settings.get("action")
        if action not in ("store_true", argparse.BooleanOptionalAction):
            continue
        for flag in [flag_of(item.name), *item.metadata.get("aliases", ())]:
            negatable = action is argparse.BooleanOptionalAction
            switches[flag] = f"--no-{flag[2:]}" if negatable else None
    return switches
