"""A stage's command line, generated from its ``Options`` (``pipelines/stage_api/options.py``).

One flag per field, named as the field with dashes (``memory_budget`` is ``--memory-budget``) or
as its ``flag`` metadata says (``--set`` for ``overrides``), plus the field's ``aliases``. The
type gives the argparse settings: a bool is a switch (``--x/--no-x``), a ``Literal`` gives the
choices, an int or float its type, a ``tuple[...]`` takes several values; a field's ``cli``
metadata changes what differs (``{"positional": True, "nargs": "*"}`` makes a positional
argument). The old names in the class's ``RENAMED`` stay hidden flags that set the new option,
and its ``OLD_VALUES`` stay accepted values; each old spelling used logs one deprecation line.
Every flag a stage does not know is a Beam pipeline option (its ``beam_options`` field) in a
stage that runs pipelines, and an error otherwise.

``--help`` lists the options users set often; fields declared ``advanced`` only under
``--help-all``.

Imports no torch and no Beam, so ``sbert CMD --help`` answers at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

from sbert_pipeline.jobs.parsers.stage_help import (
    OLD_FLAGS_USED,
    StageParser,
    Switch,
    description,
    old_flag_action,
    usage,
)
from sbert_pipeline.stage_api.old_spellings import FLAGS, say_once
from sbert_pipeline.stage_api.options import (
    BEAM_FIELD,
    StageOptions,
    field_types,
    upgraded_values,
)

# How a number is named in --help where its field names no metavar: --k N, --threshold X.
_NUMBER_METAVARS = {int: "N", float: "X"}
# The namespace attribute of the old positional values of a field declared ``old_positional``.
_OLD_POSITIONAL = "{}_old_positional"


def cli_fields(options_type: type[StageOptions]) -> list[dataclasses.Field]:
    """The fields of ``options_type`` that have a flag."""
    return [item for item in dataclasses.fields(options_type) if item.metadata.get("in_cli", True)]


def flag_of(name: str) -> str:
    """The flag of field ``name``: ``memory_budget`` -> ``--memory-budget``."""
    return f"--{name.replace('_', '-')}"


def field_flag(item: dataclasses.Field) -> str:
    """The flag of the field ``item``: its ``flag`` metadata, else its name with dashes."""
    return item.metadata.get("flag") or flag_of(item.name)


def old_names(options_type: type[StageOptions], name: str) -> list[str]:
    """The old names of field ``name`` (``RENAMED``'s keys that now mean it)."""
    return [old for old, new in options_type.RENAMED.items() if new == name]


def build_options_parser(options_type: type[StageOptions], prog: str) -> StageParser:
    """The parser of a stage command: its description from the ``Options`` docstring, a flag
    per field of ``options_type`` (in the sections the fields name; advanced ones only in
    ``--help-all``), hidden old flags, defaults shown."""
    hints = field_types(options_type)
    fields = cli_fields(options_type)
    # Required options first, then positional arguments.
    shown = sorted((item for item in fields if _in_usage(item)), key=_is_positional)
    required = [_usage_part(item, hints[item.name]) for item in shown]
    beam = BEAM_FIELD in {item.name for item in dataclasses.fields(options_type)}
    parser = StageParser(
        prog=prog,
        description=description(options_type, prog.split()[-1]),
        usage=usage(prog, required, beam),
    )
    groups: dict[str, Any] = {}
    for item in fields:
        group_name = item.metadata.get("group")
        target: Any = parser
        if group_name:
            if group_name not in groups:
                groups[group_name] = parser.add_argument_group(group_name)
            if item.metadata.get("group_help"):
                groups[group_name].description = item.metadata["group_help"]
            target = groups[group_name]
        _add_field(parser, target, options_type, item, hints[item.name])
    return parser


def _add_field(
    parser: StageParser, target: Any, options_type: type, item: dataclasses.Field, hint: Any
) -> None:
    """Add the flag (or positional argument) of ``item``, its aliases and its old flags."""
    settings = argparse_settings(item, hint, options_type.OLD_VALUES.get(item.name, {}))
    if settings.pop("positional", False):
        action = target.add_argument(item.name, **settings)
    else:
        old = [flag_of(name) for name in old_names(options_type, item.name)]
        if old:
            settings["required"] = False  # given by its old name, it is still given
        flags = [field_flag(item), *item.metadata.get("aliases", ())]
        action = target.add_argument(*flags, dest=item.name, **settings)
        if old:
            hidden = {**settings, "help": argparse.SUPPRESS, "default": argparse.SUPPRESS}
            old_flag_action(target.add_argument(*old, dest=item.name, **hidden), flags[0])
    if item.metadata.get("old_positional"):
        # The bare values it once took (finetune's KEY=VALUE ...), still read, hidden.
        target.add_argument(
            _OLD_POSITIONAL.format(item.name), nargs="*", default=[], help=argparse.SUPPRESS
        )
    if item.metadata.get("advanced"):
        parser.advanced.add(action)


def _is_positional(item: dataclasses.Field) -> bool:
    return bool(item.metadata.get("cli", {}).get("positional", False))


def _in_usage(item: dataclasses.Field) -> bool:
    return bool(item.metadata.get("required")) or _is_positional(item)


def _usage_part(item: dataclasses.Field, hint: Any) -> str:
    """How a required option or a positional argument is written in the usage line."""
    settings = argparse_settings(item, hint)
    metavar = settings.get("metavar") or item.name.upper()
    if settings.get("positional"):
        return f"[{metavar} ...]" if settings.get("nargs") == "*" else metavar
    many = settings.get("nargs") == "+"
    return f"{field_flag(item)} {metavar}" + (f" [{metavar} ...]" if many else "")


def argparse_settings(
    item: dataclasses.Field, hint: Any, old_values: Mapping[Any, Any] | None = None
) -> dict[str, Any]:
    """The ``add_argument`` keywords of the field ``item`` of type ``hint`` (``old_values``:
    the values it still accepts from before, with a deprecation line)."""
    meta = item.metadata
    overrides = dict(meta.get("cli", {}))
    overrides.pop("negatable", False)  # every switch has its --no- form
    old = [value for value in old_values or {} if isinstance(value, str)]
    # argparse formats help with %-style (``%(default)s``); an option's help is plain text, also
    # shown in the YAML docs, so a literal percent sign ("80% of ...") is escaped here.
    help_text = meta.get("help", "").replace("%", "%%")
    settings: dict[str, Any] = {"help": help_text, "default": item.default}
    if meta.get("metavar"):
        settings["metavar"] = meta["metavar"]
    if meta.get("required"):
        settings["required"] = True
    base, _ = _unwrap(hint)
    if base is bool:
        settings["action"] = Switch
        settings.pop("metavar", None)
        if old:
            settings["old_values"] = old
    elif get_origin(base) is Literal:
        choices = list(get_args(base))
        settings["choices"] = choices + [value for value in old if value not in choices]
        settings["type"] = type(choices[0])
        if old:
            settings.setdefault("metavar", "{" + ",".join(map(str, choices)) + "}")
    elif get_origin(base) is tuple:
        settings["nargs"] = "+"
        settings["action"] = "extend"
        settings["default"] = list(item.default or ())
        (item_type, *_) = get_args(base) or (str,)
        if item_type in (int, float):
            settings["type"] = item_type
    elif base in (int, float):
        settings["type"] = base
        settings.setdefault("metavar", _NUMBER_METAVARS[base])
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
    options_type: type[StageOptions], argv: Sequence[str] | None, prog: str
) -> StageOptions:
    """``argv`` as ``options_type``: its flags, and any others as its Beam options. Each old
    spelling used (a flag, a value, bare values) logs its deprecation line.

    Raises:
        SystemExit: argparse's usage error (a missing required flag, a bad choice or type), or
            an unknown flag in a stage that runs no pipeline.
        OptionError: a value the stage refuses, naming the flag.
    """
    parser = build_options_parser(options_type, prog)
    args, rest = parser.parse_known_args(argv)
    for old, new in getattr(args, OLD_FLAGS_USED, None) or []:
        say_once(f"{old} is the old name of {new}; it will be removed in the next version")
    values = {item.name: getattr(args, item.name) for item in cli_fields(options_type)}
    for item in cli_fields(options_type):
        bare = getattr(args, _OLD_POSITIONAL.format(item.name), None)
        if bare:
            metavar = item.metadata.get("cli", {}).get("metavar", "VALUE")
            say_once(
                f"bare {metavar} arguments ({' '.join(bare)}) are the old spelling of "
                f"{field_flag(item)} {metavar}; it will be removed in the next version"
            )
            values[item.name] = [*bare, *values[item.name]]
    names = {item.name for item in dataclasses.fields(options_type)}
    if BEAM_FIELD in names:
        values[BEAM_FIELD] = tuple(rest)
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return options_type(**upgraded_values(options_type, values, FLAGS))


def options_flags(options_type: type[StageOptions], values: Mapping[str, Any]) -> list[str]:
    """``values`` (field name -> value, as in a config) as the command line of
    ``options_type``: what ``sbert submit`` hands a job that runs on a worker.

    None leaves a flag out, a bool is the flag or its ``--no-`` form (left out where false is
    the default), a list is the flag and its values (joined with commas where the flag parses
    one comma-separated value; one flag per value where it is repeated); a positional field's
    values come last. Old names and values are written in their new spelling (the options
    built from ``values`` said so already).

    Raises:
        ValueError: a key that is no option of the stage.
    """
    by_name = {item.name: item for item in cli_fields(options_type)}
    hints = field_types(options_type)
    argv: list[str] = []
    positional: list[str] = []
    for key, value in _new_spellings(options_type, values).items():
        item = by_name.get(key)
        if item is None:
            raise ValueError(f"{values_key(values, key)}: not an option of this stage")
        if value is None:
            continue
        flag = field_flag(item)
        settings = argparse_settings(item, hints[key])
        if settings.get("positional"):
            items = value if isinstance(value, list | tuple) else [value]
            positional += [str(one) for one in items]
        elif isinstance(value, bool):
            if value:
                argv.append(flag)
            elif item.default is not False:
                argv.append(f"--no-{flag[2:]}")
        elif isinstance(value, list | tuple):
            if settings.get("action") == "append":
                argv += [f"{flag}={one}" for one in value]
            elif settings.get("nargs") == "+":
                argv += [flag, *map(str, value)] if value else []
            else:
                argv.append(f"{flag}={','.join(map(str, value))}")
        else:
            argv.append(f"{flag}={value}")
    return argv + positional


def _new_spellings(options_type: type[StageOptions], values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` keyed by field name (dashes read as underscores), old names and old values
    replaced by the new ones, without a word (the caller has built the options already)."""
    result: dict[str, Any] = {}
    for key, value in values.items():
        name = str(key).replace("-", "_")
        result[options_type.RENAMED.get(name, name)] = value
    for name, table in options_type.OLD_VALUES.items():
        for old, new in table.items():
            value = result.get(name)
            if name in result and type(old) is type(value) and old == value:
                result.update(new if isinstance(new, dict) else {name: new})
    return result


def values_key(values: Mapping[str, Any], name: str) -> str:
    """The key of ``values`` that names field ``name`` (as written: ``keep-text``)."""
    return next((str(key) for key in values if str(key).replace("-", "_") == name), name)


def switch_flags(options_type: type[StageOptions]) -> dict[str, str | None]:
    """Every on/off flag of ``options_type`` (its aliases and old names too) -> its ``--no-``
    form, or None where off is the default (nothing to say)."""
    hints = field_types(options_type)
    switches: dict[str, str | None] = {}
    for item in cli_fields(options_type):
        if argparse_settings(item, hints[item.name]).get("action") is not Switch:
            continue
        old = [flag_of(name) for name in old_names(options_type, item.name)]
        for flag in [field_flag(item), *item.metadata.get("aliases", ()), *old]:
            switches[flag] = None if item.default is False else f"--no-{flag[2:]}"
    return switches
