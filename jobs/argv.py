"""Config values -> command-line flags, checked against the command's own parser.

The one converter of ``sbert run`` (a stage section -> that stage's command line) and ``sbert
submit`` (``args:`` -> the job's options, ``beam:`` -> Beam's), so both read a config the same
way::

    to_argv({"keep_text": True, "normalize": False, "keep_fields": ["a", "b"]}, actions, "input",
            dashes=True)
    # -> ["--keep-text", "--no-normalize", "--keep-fields=a,b"]

None leaves an option out (the command's default), ``true``/``false`` switch an on/off option
(``false`` is written as the negative form where the option has one, so it means off rather
than "the default"), a list is one comma-separated value (or the flag repeated, for Beam's
accumulating options), and anything else is its text.
"""

from __future__ import annotations

import argparse
import difflib
import json
from collections.abc import Collection, Mapping
from typing import Any


def option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every option string of ``parser`` (``--keep-text``, ``--no-normalize``) -> its action."""
    # argparse offers no public listing of its options; ``_actions`` has been stable for as
    # long as argparse has existed, and checking names here is what turns typos into errors.
    return {flag: action for action in parser._actions for flag in action.option_strings}


def check_values(where: str, parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Let the parser check choices and types now, as one error instead of a usage dump.

    Raises:
        ValueError: ``"{where}: argument --x: invalid choice: ..."``.
    """
    parser.exit_on_error = False
    try:
        parser.parse_known_args(argv)
    except argparse.ArgumentError as err:
        raise ValueError(f"{where}: {err}") from None


def to_argv(
    values: Mapping[str, Any],
    actions: Mapping[str, argparse.Action],
    where: str,
    *,
    dashes: bool = False,
    negative: str = "--no-",
    owned: Collection[str] = (),
    owner: str = "",
    command: str | None = None,
    repeat_lists: bool = False,
    allow_mappings: bool = False,
) -> list[str]:
    """``{name: value}`` as flags of the command whose options are ``actions``.

    Args:
        values: option names (without ``--``) -> values.
        actions: :func:`option_actions` of the command's parser.
        where: the config key the values sit under, for messages (``"args"``, ``"embed"``).
        dashes: names use ``_`` for ``-`` (``text_field`` is ``--text-field``).
        negative: prefix of an on/off option's negative form (Beam's is ``--no_``).
        owned: flags the caller sets itself, refused here.
        owner: who sets the ``owned`` flags, for messages (``"sbert run"``).
        command: names the command in "not an option of" messages; without it they say
            "unknown option".
        repeat_lists: a list repeats the flag once per item (Beam's accumulating options)
            instead of joining the items with commas.
        allow_mappings: a mapping is written as JSON (Beam options such as
            ``--dataflow_service_options`` take one).

    Raises:
        ValueError: an unknown or owned option, or a value of the wrong shape, naming
            ``where.key`` (with the closest option name when there is one).
    """
    argv: list[str] = []
    for key, value in values.items():
        name = str(key).replace("_", "-") if dashes else str(key)
        flag = f"--{name}"
        action = actions.get(flag)
        if action is None:
            close = difflib.get_close_matches(flag, list(actions), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            if command is not None:
                raise ValueError(f"{where}.{key}: {flag} is not an option of {command}{hint}")
            raise ValueError(f"{where}.{key}: unknown option {flag}{hint}")
        if flag in owned:
            raise ValueError(f"{where}.{key}: {flag} is set by {owner}, not by the config")
        argv += _flags(
            f"{where}.{key}",
            flag,
            value,
            action,
            actions,
            negative=negative,
            repeat_lists=repeat_lists,
            allow_mappings=allow_mappings,
        )
    return argv


def _flags(
    where: str,
    flag: str,
    value: Any,
    action: argparse.Action,
    actions: Mapping[str, argparse.Action],
    *,
    negative: str,
    repeat_lists: bool,
    allow_mappings: bool,
) -> list[str]:
    is_switch = action.nargs == 0
    if value is None:
        return []
    if isinstance(value, bool):
        if not is_switch:
            raise ValueError(f"{where} takes a value, not {str(value).lower()}")
        if value:
            return [flag]
        off = f"{negative}{flag[2:]}"
        return [off] if off in actions else []
    if is_switch:
        raise ValueError(f"{where} is an on/off option: write true or false, not {value!r}")
    if isinstance(value, dict):
        if not allow_mappings:
            raise ValueError(f"{where}: a mapping is only allowed for Beam options")
        return [f"{flag}={json.dumps(value)}"]
    if isinstance(value, list | tuple):
        items = [_scalar(where, item) for item in value]
        if repeat_lists:
            return [f"{flag}={item}" for item in items]
        return [f"{flag}={','.join(items)}"] if items else []
    return [f"{flag}={_scalar(where, value)}"]


def _scalar(where: str, value: Any) -> str:
    if isinstance(value, list | tuple | dict):
        raise ValueError(f"{where}: nested lists and mappings are not supported")
    return str(value).lower() if isinstance(value, bool) else str(value)
