"""The rows ``deduplicate`` is given, checked and read once: a pandas DataFrame, a pyarrow Table
or a list of texts, with their texts and ids as strings.

Every mistake is refused before a model loads, naming the argument (``data``, ``against``,
``text``, ``id``): another type, no rows, a missing column, a null, empty or non-string text,
a null or repeated id.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

Kind = Literal["frame", "table", "texts"]
# Column names of the rows handed to the embed stage, and of a list's rows in the result.
ID_COLUMN = "id"
TEXT_COLUMN = "text"


@dataclass(frozen=True)
class InputRows:
    """One argument's rows.

    Attributes:
        data: the rows as given (a list of texts as a one-column DataFrame ``text``, plus
            ``id`` ``0 .. n-1``).
        kind: what was given: a pandas DataFrame, a pyarrow Table or a list of texts.
        ids: every row's id as the stages see it (``str`` of the value), in row order.
        id_values: the ids as given (ints stay ints), in row order.
        texts: every row's text, in row order.
    """

    data: Any
    kind: Kind
    ids: list[str]
    id_values: list[Any]
    texts: list[str]

    @property
    def corpus(self) -> pa.Table:
        """The two columns the embed stage reads: ``id`` and ``text``."""
        return pa.table({ID_COLUMN: self.ids, TEXT_COLUMN: self.texts})

    def digest(self) -> str:
        """sha256 of the ids and texts, in order: what a rerun compares."""
        digest = hashlib.sha256()
        for value in (*self.ids, *self.texts):
            encoded = value.encode("utf-8", "surrogatepass")
            digest.update(len(encoded).to_bytes(8, "little") + encoded)
        return digest.hexdigest()


def input_rows(data: Any, text: str, id: str | None, argument: str) -> InputRows:
    """``data`` (the argument named ``argument``) checked and read. A list of texts gets the
    ids ``0 .. n-1`` as ``data``, ``against-0 .. against-(m-1)`` as ``against`` (apart from the
    data's).

    Raises:
        TypeError: ``data`` is no DataFrame, Table or list of strings.
        ValueError: no rows, a missing column, a bad text or a bad id, naming the argument.
    """
    kind = _kind(data, argument)
    if kind == "texts":
        texts = list(data)
        if id is not None:
            raise ValueError(f"id: {argument} is a list of texts, which has no id column")
        prefix = "" if argument == "data" else f"{argument}-"
        numbers = [f"{prefix}{row}" if prefix else row for row in range(len(texts))]
        frame = pandas_module(argument).DataFrame({ID_COLUMN: numbers, text: texts})
        return _checked(frame, "texts", texts, numbers, text, argument)
    columns = [str(name) for name in (data.columns if kind == "frame" else data.column_names)]
    for name, column in (("text", text), ("id", id)):
        if column is not None and column not in columns:
            raise ValueError(
                f"{name}: {argument} has no column {column!r}; its columns: {', '.join(columns)}"
            )
    texts = _values(data, kind, text)
    id_values = list(range(len(texts))) if id is None else _values(data, kind, id)
    return _checked(data, kind, texts, id_values, text, argument)


def _kind(data: Any, argument: str) -> Kind:
    module = type(data).__module__.split(".")[0]
    if module == "pandas" and type(data).__name__ == "DataFrame":
        return "frame"
    if isinstance(data, pa.Table):
        return "table"
    if isinstance(data, list | tuple):
        return "texts"
    raise TypeError(
        f"{argument}: expected a pandas DataFrame, a pyarrow Table or a list of texts; got "
        f"{type(data).__name__}"
    )


def pandas_module(argument: str = "data") -> Any:
    """pandas, or an ImportError saying how to install it (pandas is not a dependency: only a
    list of texts, whose tables come back as DataFrames, needs it here)."""
    try:
        import pandas
    except ImportError:
        raise ImportError(
            f"{argument}: a list of texts comes back as pandas DataFrames, and pandas is not "
            "installed: pip install pandas (or pass a pyarrow Table: "
            "pa.table({'text': texts}))"
        ) from None
    return pandas


def _values(data: Any, kind: Kind, column: str) -> list[Any]:
    if kind == "frame":
        by_name = {str(name): name for name in data.columns}
        values = data[by_name[column]].tolist()
        # pandas holds a missing value as NaN or NaT as often as None.
        return [None if pandas_module().isna(value) is True else value for value in values]
    return data.column(column).to_pylist()


def _checked(
    data: Any, kind: Kind, texts: list, id_values: list, text: str, argument: str
) -> InputRows:
    if not texts:
        raise ValueError(f"{argument}: no rows to deduplicate")
    for row, value in enumerate(texts):
        problem = (
            "no text (null)"
            if value is None
            else f"{value!r}, not a text"
            if not isinstance(value, str)
            else "an empty text"
            if not value.strip()
            else None
        )
        if problem is not None:
            if kind == "texts":
                raise ValueError(f"{argument}: item {row} has {problem}")
            raise ValueError(f"text: row {row} of {argument} (column {text!r}) has {problem}")
    ids = []
    for row, value in enumerate(id_values):
        if value is None or str(value).strip() == "":
            raise ValueError(f"id: row {row} of {argument} has no id")
        ids.append(str(value))
    _refuse_repeated(ids, argument)
    return InputRows(data, kind, ids, id_values, texts)


def _refuse_repeated(ids: list[str], argument: str) -> None:
    seen: set[str] = set()
    repeated = [value for value in ids if value in seen or seen.add(value)]
    if repeated:
        raise ValueError(
            f"id: {len(repeated)} ids of {argument} occur more than once (first: "
            f"{repeated[0]!r}); every row needs its own id"
        )


def refuse_shared_ids(rows: InputRows, reference: InputRows) -> None:
    """Refuse ids that are both a row's and a reference row's (dedup needs them apart)."""
    shared = set(rows.ids).intersection(reference.ids)
    if shared:
        first = next(value for value in rows.ids if value in shared)
        raise ValueError(
            f"against: {len(shared)} ids are both in data and in against (first: {first!r}); "
            "give them distinct ids"
        )
