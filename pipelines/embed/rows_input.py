"""Rows in memory as the embed stage's input (``embed.Options(input=...)`` from Python): a list
of texts, a pandas Series of texts, a pandas DataFrame or a pyarrow Table.

They are written to one Parquet file in a temporary folder, which the stage reads as it reads
any corpus file (``text_field``, ``id_field``, ``keep_fields``; a bad row of a table is rejected
and counted in ``_errors/``), and the folder is removed when the run ends. A list of texts, and a
table without ``id_field``, get their row numbers ``0 .. n-1`` as ids: a file's rows would get
``file:row``, which the temporary file's name would make meaningless. The workers read that file
from this machine's disk, so the run needs a local runner that waits for it.

Errors name the keyword as Python spells it (``input: ...``): only Python passes rows.
Beam-free.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

# The name of the temporary file; the embeddings manifest records it as the input pattern.
ROWS_FILE = "rows.parquet"
TEMP_PREFIX = "sbert-embed-rows-"
# What ``input`` may be, for messages.
ACCEPTED = (
    "a glob of corpus files (str), a list of texts, a pandas Series of texts, a pandas "
    "DataFrame or a pyarrow Table"
)


def is_in_memory(value: Any) -> bool:
    """Whether ``input`` holds rows rather than naming files."""
    return not isinstance(value, str)


def _kind(value: Any) -> str | None:
    """``"texts"``, ``"frame"`` (pandas), ``"table"`` (pyarrow) or None for anything else."""
    if isinstance(value, list | tuple):
        return "texts"
    module = type(value).__module__.split(".")[0]
    name = type(value).__name__
    if module == "pandas":
        return {"Series": "texts", "DataFrame": "frame"}.get(name)
    if module == "pyarrow" and name == "Table":
        return "table"
    return None


def column_names(value: Any) -> list[str]:
    """The columns of a DataFrame or a Table."""
    names = value.columns if _kind(value) == "frame" else value.column_names
    return [str(name) for name in names]


def check_rows(
    value: Any, text_field: str, id_field: str | None, keep_fields: Sequence[str]
) -> None:
    """Refuse rows in memory that cannot be read: another type, a list holding a non-text, a
    column option naming no column.

    Raises:
        TypeError: not one of the accepted kinds, or a list item that is no string.
        ValueError: ``id_field``/``keep_fields`` with a list of texts, or a field option naming
            no column (the message lists the columns).
    """
    kind = _kind(value)
    if kind is None:
        raise TypeError(f"input: expected {ACCEPTED}; got {type(value).__name__}")
    if kind == "texts":
        for position, item in enumerate(value):
            if not isinstance(item, str):
                raise TypeError(f"input: item {position} is {item!r}, not a text (str)")
        for name, given in (("id_field", id_field), ("keep_fields", keep_fields)):
            if given:
                raise ValueError(
                    f"{name}: a list of texts has no columns (its ids are 0 .. n-1); give a "
                    "DataFrame or a Table to name columns"
                )
        return
    columns = column_names(value)
    named = [("text_field", text_field), ("id_field", id_field)]
    for option, field in [*named, *(("keep_fields", field) for field in keep_fields)]:
        if field is not None and field not in columns:
            raise ValueError(
                f"{option}: the input has no column {field!r}; its columns: {', '.join(columns)}"
            )


def rows_table(
    value: Any, text_field: str, id_field: str | None, keep_fields: Sequence[str] = ()
) -> tuple[pa.Table, str]:
    """The rows as an Arrow table of the columns the options read, and the id field to read
    them with (a row-number column added where they have none).

    Raises:
        ValueError: a DataFrame column Arrow cannot store (mixed types), naming it.
    """
    import pyarrow as pa

    if _kind(value) == "texts":
        texts = value.tolist() if hasattr(value, "tolist") else list(value)
        table = pa.table({text_field: pa.array(texts, pa.string())})
    else:
        fields = list(dict.fromkeys(f for f in (text_field, id_field, *keep_fields) if f))
        frame = _kind(value) == "frame"
        table = _frame_table(value, fields) if frame else value.select(fields)
    if id_field is None:
        id_field = _free_name(table.column_names, "id")
        numbers = pa.array([str(row) for row in range(table.num_rows)], pa.string())
        table = table.append_column(id_field, numbers)
    return table, id_field


def _frame_table(frame: Any, fields: list[str]) -> pa.Table:
    import pyarrow as pa

    by_name = {str(name): name for name in frame.columns}
    columns = {}
    for name in fields:
        try:
            columns[name] = pa.array(frame[by_name[name]], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
            message = f"input: column {name!r} cannot be stored as Parquet ({err})"
            raise ValueError(message) from None
    return pa.table(columns)


def _free_name(taken: Sequence[str], name: str) -> str:
    while name in taken:
        name += "_"
    return name


@contextmanager
def rows_on_disk(
    value: Any, text_field: str, id_field: str | None, keep_fields: Sequence[str]
) -> Iterator[tuple[str, str]]:
    """The rows written to a temporary Parquet file: yields ``(its path, the id field)``; the
    folder is removed on leaving, whatever happened."""
    import pyarrow.parquet as pq

    table, field = rows_table(value, text_field, id_field, keep_fields)
    folder = tempfile.mkdtemp(prefix=TEMP_PREFIX)
    try:
        path = os.path.join(folder, ROWS_FILE)
        pq.write_table(table, path)
        yield path, field
    finally:
        shutil.rmtree(folder, ignore_errors=True)
