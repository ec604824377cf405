"""Typed config dataclasses from YAML/JSON files and ``key=value`` overrides.

A config is a dataclass whose fields carry type hints; :func:`load_config` reads a file, applies
command-line overrides and converts every value to its field's declared type, so a wrong key or
value fails with a message that names it:

    config = load_config(TrainingConfig, "train.yaml", ["epochs=4", "precision=bfloat16"])

A field may accept other spellings of its values with ``Annotated[..., Aliases({...})]``.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

ConfigT = TypeVar("ConfigT")


# Compared and hashed by identity: typing hashes Annotated metadata, and a dict has no hash.
@dataclass(frozen=True, eq=False)
class Aliases:
    """Other spellings a field accepts, mapped to the one it stores.

    Example::

        precision: Annotated[Literal["bfloat16"], Aliases({"bf16": "bfloat16"})] = "bfloat16"
    """

    names: Mapping[str, str]


def load_config(
    cls: type[ConfigT],
    path: str | os.PathLike | None = None,
    overrides: Sequence[str] = (),
) -> ConfigT:
    """Build a config dataclass from a YAML/JSON file and ``key=value`` overrides.

    Nested sections are addressed with dots (``training.epochs=4``), list items by position
    (``test.0.path=...``). Values are read by :func:`override_value` (``null``, ``true``,
    ``[a, b]`` parsed; other scalars kept as written) and converted to the field's declared
    type; a comma-separated string fills a tuple field.

    Raises:
        ValueError: unreadable file, unknown key, or a value of the wrong type, naming the key.
    """
    data = read_config_file(path) if path is not None else {}
    for override in overrides:
        apply_override(data, override)
    return config_from_dict(cls, data)


def read_config_file(path: str | os.PathLike) -> dict:
    """The mapping in a YAML or JSON file (JSON is read as YAML, which it is a subset of).

    Raises:
        ValueError: the file cannot be read, is not valid YAML, uses YAML aliases (see
            :func:`load_yaml`) or does not hold a mapping; one line naming the file.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = getattr(err, "strerror", None) or err
        raise ValueError(f"{path}: cannot read the config ({reason})") from err
    data = load_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the config must be a mapping of keys to values")
    return data


def load_yaml(text: str, where: str, *, kind: str = "YAML/JSON") -> Any:
    """Parse YAML (or JSON) text safely, refusing aliases; the one YAML loader of configs.

    Aliases are refused before anything is built: PyYAML shares an aliased node instead of
    copying it, so loading a "billion laughs" file is quick, but every walk over the result
    (variable expansion, type checks, writing the effective config) visits each value as often
    as it is referenced: nine nested lines of nine aliases are 10^9 values. Configs need no
    aliases, and scanning the tokens is linear in the text.

    Args:
        text: the YAML text.
        where: what it is, for messages (a file name, ``"the value"``).
        kind: what the text is said to be in messages about its syntax.

    Raises:
        ValueError: ``"{where}: line N: YAML aliases (*name) are not accepted ..."`` or
            ``"{where}: invalid {kind} at line L, column C: ..."``.
    """
    import yaml

    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.AliasToken):
                line = token.start_mark.line + 1
                raise ValueError(
                    f"{where}: line {line}: YAML aliases (*{token.value}) are not accepted in "
                    "configs; write the value out (nested aliases can expand to billions of "
                    "values)"
                )
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        position = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ValueError(f"{where}: invalid {kind}{position}: {problem}") from None


def parse_override(override: str, where: str = "") -> tuple[list[str], Any]:
    """Split a ``--set`` value ``key.path=value`` into its key path and its value.

    The one ``--set`` rule of ``sbert run``, ``sbert submit`` and finetune configs: ``null``,
    ``true``/``false``, ``[a, b]`` lists and ``{k: v}`` mappings are parsed as YAML (aliases
    refused); any other value stays the exact text, so ``1.20`` or ``007`` reach the option as
    written. A typed config field then converts the text to its type (:func:`config_from_dict`).

    Args:
        override: the ``--set`` argument.
        where: a prefix for messages (``"--set x=1: "``); empty for none.

    Raises:
        ValueError: no ``=`` or no key (``"override 'x' is not of the form key=value"``), or
            a list/mapping that is not valid YAML or uses aliases.
    """
    key, separator, raw = override.partition("=")
    if not separator or not key.strip():
        raise ValueError(f"{where}override {override!r} is not of the form key=value")
    return key.strip().split("."), override_value(raw, f"{where}the value")


def override_value(raw: str, where: str = "the value") -> Any:
    """A ``--set`` value: YAML structure parsed, scalars kept as the text that was written.

    ``null``, booleans, lists and mappings are parsed, and so are numbers that read back as
    written (``2``, ``0.95``) and quoted strings (their quotes removed); anything else stays
    the exact text, so ``1.20``, ``007`` or a
    date reach an option as written, and a typed config field converts the text to its type
    (``"1.20"`` -> 1.2 for a float field).
    """
    text = raw.strip()
    if not text:
        return ""
    if text[0] in "[{":
        return load_yaml(raw, where)  # a malformed list or mapping is an error, not a string
    try:
        value = load_yaml(raw, where)
    except ValueError as err:
        if "YAML aliases" in str(err):
            raise
        return raw
    if value is None or isinstance(value, bool | list | dict):
        return value
    if isinstance(value, int | float) and str(value) == text:
        return value
    if isinstance(value, str) and text[0] in "\"'":
        return value  # a quoted scalar means the text inside the quotes (``output="a b"``)
    return raw


def apply_override(data: dict, override: str) -> None:
    """Set ``key.path=value`` in a nested dict of config values, creating sections as needed.

    See :func:`parse_override` for how the value is read.
    """
    parts, value = parse_override(override)
    node: Any = data
    for position, part in enumerate(parts[:-1]):
        child = _child(node, part, override)
        if child is None:
            child = [] if parts[position + 1].isdigit() else {}
            _set_child(node, part, child, override)
        node = child
    _set_child(node, parts[-1], value, override)


def _child(node: Any, part: str, override: str) -> Any:
    if isinstance(node, list):
        index = _list_index(node, part, override, allow_append=True)
        return node[index] if index < len(node) else None
    if isinstance(node, dict):
        return node.get(part)
    raise ValueError(f"override {override!r}: {part!r} is inside a value that is not a section")


def _set_child(node: Any, part: str, value: Any, override: str) -> None:
    if isinstance(node, list):
        index = _list_index(node, part, override, allow_append=True)
        if index == len(node):
            node.append(value)
        else:
            node[index] = value
    elif isinstance(node, dict):
        node[part] = value
    else:
        raise ValueError(f"override {override!r}: {part!r} is inside a value that is not a section")


def _list_index(node: list, part: str, override: str, *, allow_append: bool) -> int:
    limit = len(node) + (1 if allow_append else 0)
    if not part.isdigit() or int(part) >= limit:
        raise ValueError(f"override {override!r}: list index {part!r} must be 0..{limit - 1}")
    return int(part)


def config_from_dict(cls: type[ConfigT], data: Any, where: str = "") -> ConfigT:
    """Build the dataclass ``cls`` from a mapping, converting each value to its field's type."""
    if not isinstance(data, dict):
        raise ValueError(f"{where or cls.__name__}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in fields(cls)]
    unknown = [key for key in data if key not in names]
    if unknown:
        raise ValueError(
            f"unknown config key(s) {', '.join(repr(where + str(k)) for k in unknown)}; "
            f"valid keys{' in ' + where.rstrip('.') if where else ''}: {', '.join(names)}"
        )
    values = {key: coerce_value(hints[key], value, where + key) for key, value in data.items()}
    return cls(**values)


def coerce_value(kind: Any, value: Any, where: str) -> Any:
    """``value`` as a value of the type ``kind`` (text read as a number, a bool or a list where
    the type says so: ``--set`` keeps ``1.20`` or ``.nan`` as written), or an error naming
    ``where``.

    Raises:
        ValueError: ``"{where}: expected ..."``.
    """
    origin, args = get_origin(kind), get_args(kind)
    if origin is Annotated:
        inner, *extras = args
        for extra in extras:
            if isinstance(extra, Aliases) and isinstance(value, str):
                value = extra.names.get(value, value)
        return coerce_value(inner, value, where)
    if origin in (typing.Union, types.UnionType):
        is_null = value is None or (
            isinstance(value, str) and value.lower() in {"null", "none", "~"}
        )
        if is_null and type(None) in args:
            return None
        errors = []
        for option in (arg for arg in args if arg is not type(None)):
            try:
                return coerce_value(option, value, where)
            except ValueError as err:
                errors.append(str(err))
        raise ValueError(errors[-1] if errors else f"{where}: invalid value {value!r}")
    if origin is Literal:
        if value not in args:
            choices = ", ".join(str(arg) for arg in args)
            raise ValueError(f"{where}: {value!r} is not one of: {choices}")
        return value
    if origin is tuple or origin is list:
        if isinstance(value, str):
            value = [item.strip() for item in value.split(",") if item.strip()]
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where}: expected a list, got {value!r}")
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                raise ValueError(f"{where}: expected {len(args)} values, got {list(value)}")
            return tuple(
                coerce_value(a, v, f"{where}[{i}]")
                for i, (a, v) in enumerate(zip(args, value, strict=True))
            )
        item = args[0] if args else Any
        items = [coerce_value(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, got {value!r}")
        key_type, value_type = args or (Any, Any)
        return {
            coerce_value(key_type, k, f"{where}.{k}"): coerce_value(value_type, v, f"{where}.{k}")
            for k, v in value.items()
        }
    if is_dataclass(kind):
        return config_from_dict(kind, value, where + ".")
    return _coerce_scalar(kind, value, where)


def _coerce_scalar(kind: Any, value: Any, where: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in {"true", "yes", "on", "1"}:
            return True
        if text in {"false", "no", "off", "0"}:
            return False
        raise ValueError(f"{where}: expected true or false, got {value!r}")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
            return int(value)
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    if kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        text = str(value).strip()
        # YAML spells the special values .nan / .inf; a value kept as text (--set) keeps that.
        text = re.sub(r"^([+-]?)\.(inf|nan)$", r"\1\2", text, flags=re.IGNORECASE)
        try:
            return float(text)  # YAML reads "2e-5" (no dot) as a string
        except (TypeError, ValueError):
            raise ValueError(f"{where}: expected a number, got {value!r}") from None
    if kind is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ValueError(f"{where}: expected text, got {value!r}")
    return value


def config_to_dict(config: Any) -> dict:
    """A config dataclass as plain JSON/YAML-safe values (tuples become lists)."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return plain(asdict(config))
