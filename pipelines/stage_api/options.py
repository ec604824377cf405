"""Typed stage options: one frozen dataclass per stage is the one source of its options.

A stage's ``Options`` (``pipelines/<stage>/options.py``) declares every option once, with its
type, default, help text and checks. Three front ends read it:

- the Python API: ``pairs.run(pairs.Options(embeddings=["out/emb"], output="out/pairs"))``;
- the command line: ``sbert pairs --embeddings out/emb --output out/pairs``, whose parser is
  generated from the fields (``jobs/options_cli.py``), a flag per field named as the field with
  dashes (``memory_budget`` is ``--memory-budget``);
- ``sbert run``: the stage's YAML section, checked by :func:`options_from_mapping`.

Declaring an option::

    @dataclass(frozen=True)
    class Options(StageOptions):
        output: str = option(help="output directory", required=True)
        threshold: float | None = option(help="pairs at or above this cosine")

        def check(self) -> None:
            if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
                raise OptionError("threshold", f"must be in [-1, 1], got {self.threshold}")

Building an ``Options`` checks it: each value against its field's type (a list is accepted for a
``tuple[...]`` field and stored as a tuple; an int for a float), required fields, the stage's
own :meth:`StageOptions.check`, that ``output`` is apart from every input the class names in
``INPUT_OPTIONS``, and the Beam options. So an ``Options`` that exists is valid, and a mistake is
one error naming the option, before the stage reads or writes anything. Argparse-free, and
``--help`` and the ``sbert run`` checks load no Beam, torch or FAISS: Beam is loaded only to
check Beam options that are given.

Values are converted before the frozen dataclass is built (its metaclass, :class:`OptionsType`,
does it): old names and values the class lists in ``RENAMED`` and ``OLD_VALUES`` become the new
ones (``old_spellings.py``), then each value is conformed to its field's type. Nothing is written
into an ``Options`` after ``__init__``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar, Literal, TypeVar, get_args, get_origin

from sbert_pipeline.io.path_relations import overlap_error
from sbert_pipeline.stage_api.old_spellings import (
    PYTHON,
    BothSpellingsError,
    Spelling,
    upgraded,
    yaml_spelling,
)

from sbert_core.config import coerce_value
from sbert_core.model.source import DEFAULT_MODEL

OptionsT = TypeVar("OptionsT", bound="StageOptions")
# The field of Beam pipeline options (a list of flags or a PipelineOptions): not recorded in
# manifests or fingerprints, as where a stage runs does not change what it writes.
BEAM_FIELD = "beam_options"
# The field of a stage's output, refused where it would replace or mix with an input.
OUTPUT_FIELD = "output"
# The field of a model, which is a path only where it names a local file or folder: otherwise a
# Hugging Face Hub id or the bundled model.
MODEL_FIELD = "model"
_BUNDLED_MODEL_NAMES = frozenset({DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"})


class OptionError(ValueError):
    """A bad option value, naming the option.

    ``str()`` names it as on the command line (``--memory-budget: ...``); ``sbert run`` names
    it by its key (``index.memory_budget: ...``) through :meth:`at`.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"--{name.replace('_', '-')}: {message}")
        self.name = name
        self.message = message

    def at(self, section: str) -> ValueError:
        """The same error named by its config key, ``section.name``."""
        return ValueError(f"{section}.{self.name}: {self.message}")


def option(
    default: Any = None,
    help: str = "",
    *,
    required: bool = False,
    metavar: str | None = None,
    group: str | None = None,
    group_help: str | None = None,
    aliases: tuple[str, ...] = (),
    cli: Mapping[str, Any] | None = None,
    in_cli: bool = True,
    advanced: bool = False,
    flag: str | None = None,
    old_positional: bool = False,
) -> Any:
    """A field of a stage's ``Options``.

    Args:
        default: the value when the option is not given (immutable: use a tuple for a list).
        help: the option's ``--help`` line and its description in the YAML docs.
        required: the option must be given (its default is then None).
        metavar: the value's name in ``--help``.
        group: the ``--help`` section it is listed under.
        group_help: the section's description (given on one field of the section).
        aliases: other flags that set it (old spellings kept working), e.g. ``("--k",)``.
        cli: argparse settings that differ from what the type implies, such as
            ``{"nargs": "+", "action": "extend"}`` for ``--embeddings A B``, or ``{"type":
            parse_list}`` for a comma-separated value.
        in_cli: false for a field only the Python API and ``sbert run`` set.
        advanced: a setting users seldom change: ``--help`` leaves it out, ``--help-all``
            lists it.
        flag: the flag, where it is not the name with dashes (``"--set"`` for ``overrides``).
        old_positional: the command line still takes its values as bare arguments, as it once
            did, with a deprecation line.
    """
    metadata = {
        "help": help,
        "required": required,
        "metavar": metavar,
        "group": group,
        "group_help": group_help,
        "aliases": tuple(aliases),
        "cli": dict(cli or {}),
        "in_cli": in_cli,
        "advanced": advanced,
        "flag": flag,
        "old_positional": old_positional,
    }
    return dataclasses.field(default=default, metadata=metadata)


class OptionsType(type):
    """The metaclass of :class:`StageOptions`: converts what a call gives before the dataclass's
    ``__init__`` stores it (old spellings, types, required fields, a list of Beam flags), so a
    frozen ``Options`` is never written to after it is built."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        values = _keywords(cls, args, kwargs)
        values = upgraded_values(cls, values, PYTHON)
        return super().__call__(**conformed_values(cls, values))


def _keywords(cls: type, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Positional arguments as the keywords of the fields they fill, in declaration order."""
    if not args:
        return kwargs
    names = [item.name for item in dataclasses.fields(cls) if item.init]
    if len(args) > len(names):
        raise TypeError(f"{cls.__name__}() takes {len(names)} positional arguments at most")
    values = dict(zip(names, args, strict=False))  # fewer arguments than fields
    for name in kwargs:
        if name in values:
            raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
    return {**values, **kwargs}


def upgraded_values(
    cls: type[StageOptions], values: Mapping[str, Any], spelling: Spelling
) -> dict[str, Any]:
    """``values`` with ``cls``'s old option names and values replaced by the new ones, one
    deprecation line for each (spelled as ``spelling`` says).

    Raises:
        OptionError: an old name and its new name both given, with different values.
    """
    try:
        return upgraded(cls.RENAMED, cls.OLD_VALUES, values, spelling)
    except BothSpellingsError as err:
        raise OptionError(err.name, err.message) from None


def conformed_values(cls: type[StageOptions], values: Mapping[str, Any]) -> dict[str, Any]:
    """Every field's value (given or default) conformed to its type: a list for a tuple, an int
    for a float, a list of Beam flags as a tuple; keywords that are no field are left to
    ``__init__`` to refuse.

    Raises:
        OptionError: a required field is None, or a value is not of its field's type.
    """
    hints = field_types(cls)
    result = dict(values)
    for item in dataclasses.fields(cls):
        if item.name in values:
            value = values[item.name]
        elif item.default is not dataclasses.MISSING:
            value = item.default
        else:
            continue  # no default: __init__ names it
        if value is None:
            if item.metadata.get("required"):
                raise OptionError(item.name, "required")
        elif item.name == BEAM_FIELD and isinstance(value, list):
            value = tuple(value)  # checked, flag by flag, after the stage's own checks
        else:
            value = conform(value, hints[item.name], item.name)
        result[item.name] = value
    return result


@dataclass(frozen=True)
class StageOptions(metaclass=OptionsType):
    """Base of every stage's ``Options``: type and required-field checks, then :meth:`check`,
    then the output against the inputs and the Beam options."""

    # The fields that name what the stage reads (folders, files or globs, one or a list): its
    # ``output`` may not be one, hold one or lie inside one.
    INPUT_OPTIONS: ClassVar[tuple[str, ...]] = ()
    # Old option names still accepted (old name -> new name), in Python, YAML and on the
    # command line, each with a deprecation line; the old name is no field.
    RENAMED: ClassVar[Mapping[str, str]] = {}
    # Old values still accepted: field -> {old value: new value, or Sets(field=value, ...)}.
    OLD_VALUES: ClassVar[Mapping[str, Mapping[Any, Any]]] = {}
    # The docs/ pages about the stage, named after "More:" in its --help.
    DOCS: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        self.check()
        self._check_output_apart()
        self._check_beam_options()

    def __getattr__(self, name: str) -> Any:
        """An old option name read (``options.id_column``): the new field's value, for code
        written against the old names, for one version. Called only for names that are not
        attributes."""
        new = type(self).RENAMED.get(name)
        if new is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return getattr(self, new)

    def _check_output_apart(self) -> None:
        """Refuse an output equal to, inside or above an input: written, it would replace the
        input or mix its files into the input's (``--overwrite`` or not)."""
        output = getattr(self, OUTPUT_FIELD, None)
        if not output:
            return
        for name in self.INPUT_OPTIONS:
            for path in _input_paths(name, getattr(self, name)):
                message = overlap_error(output, f"--{name.replace('_', '-')}", path)
                if message is not None:
                    raise OptionError(OUTPUT_FIELD, message)

    def _check_beam_options(self) -> None:
        """Check the Beam options now (loading Beam only when some are given), so a string of
        flags, an unknown flag or an unknown runner fails before the stage touches anything."""
        value = getattr(self, BEAM_FIELD, ())
        if isinstance(value, tuple) and not value:
            return
        from sbert_pipeline.stage_api.beam_options import check_beam_options

        try:
            check_beam_options(value)
        except TypeError as err:
            raise OptionError(BEAM_FIELD, str(err)) from None

    def check(self) -> None:
        """The stage's own checks of values and their combinations (raise :class:`OptionError`)."""

    def replace(self: OptionsT, **changes: Any) -> OptionsT:
        """A copy with ``changes``, checked again."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every option as plain YAML/JSON values (tuples as lists); what manifests record.
        The Beam options are left out, and an old name left empty (dedup's ``rank``)."""
        return {
            item.name: _plain(getattr(self, item.name))
            for item in dataclasses.fields(self)
            if item.name != BEAM_FIELD and not _unset_old_name(item, getattr(self, item.name))
        }


def _input_paths(name: str, value: Any) -> list[str]:
    """The paths input option ``name`` names: none for an empty value, or for a model that is
    a Hub id or the bundled model rather than a local file or folder."""
    paths = [value] if isinstance(value, str) else list(value or ())
    if name == MODEL_FIELD:
        return [p for p in paths if p not in _BUNDLED_MODEL_NAMES and _local_or_remote(p)]
    return [p for p in paths if p]


def _local_or_remote(path: str) -> bool:
    """Whether ``path`` names a URL or an existing local file or folder."""
    return "://" in path or os.path.lexists(path)


def _unset_old_name(item: dataclasses.Field, value: Any) -> bool:
    """A field without a flag left empty: an old name its options fold into the new one."""
    return not item.metadata.get("in_cli", True) and value is None


def option_fields(cls: type[StageOptions]) -> tuple[dataclasses.Field, ...]:
    """The fields of ``cls`` in declaration order."""
    return dataclasses.fields(cls)


def defaults(cls: type[StageOptions]) -> dict[str, Any]:
    """Option name -> its default (None for a required option)."""
    return {item.name: _plain(item.default) for item in dataclasses.fields(cls)}


def options_from_mapping(
    cls: type[OptionsT],
    values: Mapping[str, Any],
    where: str,
    *,
    owned: Mapping[str, Any] | None = None,
    owner: str = "sbert run",
) -> OptionsT:
    """``cls`` built from a config section, with errors naming ``where.key``.

    Args:
        cls: the stage's ``Options``.
        values: the section as read from YAML (keys are field names; ``-`` is read as ``_``).
        where: the section's name, for messages.
        owned: fields the caller sets itself (the stage's inputs and output), with their values;
            the section may not set them.
        owner: who sets the owned fields, for messages.

    Raises:
        ValueError: an unknown key (with the closest name), an owned key, a wrong type or a
            value the stage refuses, each naming ``where.key``.
    """
    # The caller's own keys: an old name there is the caller's to update, not the user's.
    owned = {cls.RENAMED.get(name, name): value for name, value in (owned or {}).items()}
    names = [item.name for item in dataclasses.fields(cls)]
    spelled: dict[str, Any] = {}
    keys: dict[str, Any] = {}  # name -> the key as written, for messages
    for key, value in values.items():
        name = str(key).replace("-", "_")
        if name not in names and name not in cls.RENAMED:
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{where}.{key}: not an option of {where}{hint}")
        spelled[name] = value
        keys[cls.RENAMED.get(name, name)] = key
    try:
        spelled = upgraded_values(cls, spelled, yaml_spelling(where))
    except OptionError as err:
        raise err.at(where) from None
    given: dict[str, Any] = {}
    for name, value in spelled.items():
        key = keys.get(name, name)
        if name in owned:
            raise ValueError(f"{where}.{key}: set by {owner}, not by the config")
        # Config text read as its field's type, as every other config of the project is read.
        given[name] = coerce_value(field_types(cls)[name], value, f"{where}.{key}")
    try:
        return cls(**given, **owned)
    except OptionError as err:
        raise err.at(where) from None


@cache
def field_types(cls: type) -> dict[str, Any]:
    """Field name -> its resolved type hint (annotations are strings under PEP 563)."""
    return typing.get_type_hints(cls)


def conform(value: Any, hint: Any, name: str) -> Any:
    """``value`` as a value of ``hint`` (a list as a tuple, an int as a float), or an error.

    Raises:
        OptionError: ``value`` is not of the type, naming the option.
    """
    ok, converted = _conform(value, hint)
    if not ok:
        raise OptionError(name, f"expected {_describe(hint)}, got {value!r}")
    return converted


def _conform(value: Any, hint: Any) -> tuple[bool, Any]:
    origin = get_origin(hint)
    if hint is Any:
        return True, value
    if origin in (typing.Union, types.UnionType):
        for arm in get_args(hint):
            ok, converted = _conform(value, arm)
            if ok:
                return True, converted
        return False, value
    if origin is Literal:
        return value in get_args(hint) and not isinstance(value, bool), value
    if hint is type(None):
        return value is None, value
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False, value
        return True, float(value)
    if hint is str:
        return isinstance(value, str), value
    if origin is tuple:
        return _conform_items(value, get_args(hint))
    if origin is dict or hint is dict:
        return isinstance(value, Mapping), value
    return True, value  # a library's type (PipelineOptions): its own code checks it


def _conform_items(value: Any, args: tuple) -> tuple[bool, Any]:
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        return False, value
    item_hint = args[0] if args else Any
    items = []
    for item in value:
        ok, converted = _conform(item, item_hint)
        if not ok:
            return False, value
        items.append(converted)
    return True, tuple(items)


def _describe(hint: Any) -> str:
    origin = get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arm) for arm in get_args(hint))
    if origin is Literal:
        return "one of " + ", ".join(repr(choice) for choice in get_args(hint))
    if origin is tuple:
        item = get_args(hint)[0] if get_args(hint) else Any
        plural = {bool: "true/false values", int: "integers", float: "numbers", str: "strings"}
        return f"a list of {plural.get(item, 'values')}"
    if hint is type(None):
        return "null"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return value


def in_range(
    name: str, value: float | None, low: float, high: float, *, low_open: bool = False
) -> None:
    """Refuse ``value`` outside ``[low, high]`` (``(low, high]`` with ``low_open``), and NaN.

    Written as "not inside" rather than "below or above": every comparison with NaN is false.

    Raises:
        OptionError: ``--name: must be in [low, high], got value``.
    """
    if value is None:
        return
    inside = (low < value <= high) if low_open else (low <= value <= high)
    if not inside:
        bracket = "(" if low_open else "["
        raise OptionError(name, f"must be in {bracket}{low:g}, {high:g}], got {value}")


def at_least(name: str, value: int | float | None, low: int | float) -> None:
    """Refuse ``value`` below ``low`` (and NaN).

    Raises:
        OptionError: ``--name: must be at least low, got value``.
    """
    if value is not None and not value >= low:
        raise OptionError(name, f"must be at least {low}, got {value}")
