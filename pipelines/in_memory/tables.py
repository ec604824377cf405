"""dedup's decisions joined back to the rows ``deduplicate`` was given: the kept rows, the
removed rows with the row each duplicates, and the groups, as tables of the input's kind."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
from sbert_pipeline.in_memory.rows import InputRows, pandas_module

# The columns ``removed`` adds to the rows.
ADDED_COLUMNS = ("duplicate_of", "score")


def refuse_added_columns(rows: InputRows) -> None:
    """Refuse rows holding a column that ``removed`` adds (it would be overwritten)."""
    if rows.kind == "texts":
        return
    names = rows.data.columns if rows.kind == "frame" else rows.data.column_names
    names = [str(name) for name in names]
    taken = [name for name in ADDED_COLUMNS if name in names]
    if taken:
        raise ValueError(
            f"data: has a column {taken[0]!r}, which the removed rows get from the result; "
            "rename it"
        )


def joined(
    rows: InputRows, reference: InputRows | None, groups: pa.Table, removed: set[str]
) -> tuple[Any, Any, Any]:
    """``(kept, removed, groups)`` as the result gives them (see ``Deduplicated``).

    Args:
        rows: the rows deduplicated.
        reference: the ``against`` rows, if any.
        groups: dedup's ``groups.parquet``.
        removed: the ids dedup removed.
    """
    values = dict(zip(rows.ids, rows.id_values, strict=True))
    if reference is not None:
        values.update(zip(reference.ids, reference.id_values, strict=True))
    ids = groups.column("id").to_pylist()
    group = groups.column("group").to_pylist()
    scores = [None if s is None or math.isnan(s) else s for s in groups.column("score").to_pylist()]
    is_representative = groups.column("is_representative").to_pylist()
    representative = {g: i for i, g, r in zip(ids, group, is_representative, strict=True) if r}
    member = {i: (representative.get(g), s) for i, g, s in zip(ids, group, scores, strict=True)}
    kept_rows = [row for row, value in enumerate(rows.ids) if value not in removed]
    removed_rows = [row for row, value in enumerate(rows.ids) if value in removed]
    duplicate_of = [values.get(member[rows.ids[row]][0]) for row in removed_rows]
    removed_scores = [member[rows.ids[row]][1] for row in removed_rows]
    columns = {
        "id": [values[value] for value in ids],
        "group": group,
        "kept": [value not in removed for value in ids],
        "score": scores,
    }
    if "reference" in groups.column_names:
        columns["reference"] = groups.column("reference").to_pylist()
    added = {"duplicate_of": duplicate_of, "score": removed_scores}
    if rows.kind == "table":
        kept_table = rows.data.take(pa.array(kept_rows, pa.int64()))
        removed_table = rows.data.take(pa.array(removed_rows, pa.int64()))
        return kept_table, _with_columns(removed_table, added), _arrow_table(columns)
    pandas = pandas_module()
    removed_frame = rows.data.iloc[removed_rows].assign(**added)
    return rows.data.iloc[kept_rows], removed_frame, pandas.DataFrame(columns)


def _with_columns(table: pa.Table, columns: dict[str, list]) -> pa.Table:
    for name, values in columns.items():
        table = table.append_column(name, _array(values))
    return table


def _arrow_table(columns: dict[str, list]) -> pa.Table:
    return pa.table({name: _array(values) for name, values in columns.items()})


def _array(values: list) -> pa.Array:
    """Values as Arrow infers them; ids of mixed types (ints and reference strings) as text."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())
