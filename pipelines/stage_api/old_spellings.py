"""Old option names and values, still accepted for one version with a deprecation line.

A stage's ``Options`` declares what changed, and this module turns the old spellings into the
new ones wherever options come from (Python keywords, a YAML section, the command line), before
the options are built::

    RENAMED = {"label_column": "label_field"}
    OLD_VALUES = {"stable_keep": {"auto": None, "on": True, "off": False}}

An old value may also stand for several fields at once (:class:`Sets`), as ``none`` once turned
a feature off that now has its own switch. Each old spelling used logs one line, once per
process, spelled as the user wrote it: ``--label-column is the old name of --label-field; it
will be removed in the next version``. Beam-free.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# A logger whose name reads well in the CLI's log format ("WARNING sbert: ...").
logger = logging.getLogger("sbert")

_REMOVAL = "it will be removed in the next version"
# The lines said in this process: each old spelling is named once, however often it is read.
_said: set[str] = set()


class BothSpellingsError(ValueError):
    """An old name given together with its new name, with other values."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name
        self.message = message


class Sets(dict):
    """An old value that now sets several fields: ``Sets(known_duplicates=False,
    known_duplicates_field=None)`` (field -> new value)."""


@dataclass(frozen=True)
class Spelling:
    """How one front end spells an option and a value, for the deprecation lines."""

    name: Callable[[str], str]
    value: Callable[[str, Any], str]


def _python_value(name: str, value: Any) -> str:
    return f"{name}={value!r}"


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def _flag_value(name: str, value: Any) -> str:
    if value is True:
        return _flag(name)
    if value is False:
        return f"--no-{_flag(name)[2:]}"
    if value is None:
        return f"leaving out {_flag(name)}"
    return f"{_flag(name)} {value}"


def yaml_spelling(where: str) -> Spelling:
    """Keys as ``where.key`` and values as YAML writes them (``true``, ``null``)."""

    def value(name: str, given: Any) -> str:
        if given is None or isinstance(given, bool):
            given = {True: "true", False: "false", None: "null"}[given]
        return f"{where}.{name}: {given}"

    return Spelling(lambda name: f"{where}.{name}", value)


PYTHON = Spelling(lambda name: name, _python_value)
FLAGS = Spelling(_flag, _flag_value)


def say_once(line: str) -> None:
    """Log ``line`` as a warning, unless this process said it already."""
    if line not in _said:
        _said.add(line)
        logger.warning("%s", line)


def forget_said() -> None:
    """Forget the lines said, so each is said again (for tests)."""
    _said.clear()


def renamed_line(old: str, new: str, spelling: Spelling) -> str:
    """The deprecation line of an old option name."""
    return f"{spelling.name(old)} is the old name of {spelling.name(new)}; {_REMOVAL}"


def upgraded(
    renamed: Mapping[str, str],
    old_values: Mapping[str, Mapping[Any, Any]],
    values: Mapping[str, Any],
    spelling: Spelling,
) -> dict[str, Any]:
    """``values`` (option name -> value) with old names and old values replaced by the new ones,
    one deprecation line for each.

    Raises:
        BothSpellingsError: an old name given with its new name and another value.
    """
    result: dict[str, Any] = {}
    for key, value in values.items():
        new = renamed.get(key)
        if new is None:
            result.setdefault(key, value)
            continue
        if new in values and values[new] != value:
            message = f"{spelling.name(key)} is the old name of {spelling.name(new)}: give one"
            raise BothSpellingsError(new, message)
        say_once(renamed_line(key, new, spelling))
        result[new] = value
    for name, table in old_values.items():
        if name not in result:
            continue
        found = _old_value(table, result[name])
        if found is None:
            continue
        old, new = found
        changes = new if isinstance(new, Sets) else {name: new}
        result.update(changes)
        said = " and ".join(spelling.value(field, value) for field, value in changes.items())
        say_once(f"{spelling.value(name, old)} is the old spelling of {said}; {_REMOVAL}")
    return result


def _old_value(table: Mapping[Any, Any], value: Any) -> tuple[Any, Any] | None:
    """(the old value, its replacement) when ``value`` is one of ``table``'s old values (of the
    same type: ``1`` is not ``True``)."""
    for old, new in table.items():
        if type(old) is type(value) and old == value:
            return old, new
    return None
