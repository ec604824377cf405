"""Merging the pairs stage's candidate tables: per-item top-k lists, pairs found twice."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA


def merge_neighbors(tables: Sequence[pa.Table], k: int) -> pa.Table:
    """Combine candidate lists per id: each neighbour once (its best score), top ``k`` kept.

    Deterministic whatever the order of ``tables`` or of their rows: lists are sorted by score
    descending, equal scores by neighbour id; the result is sorted by id. An id whose
    candidates are all empty keeps an empty list.

    Args:
        tables: ``neighbors/``-schema tables; an id may occur in several rows.
        k: list length kept.
    """
    table = pa.concat_tables([t.select(NEIGHBORS_SCHEMA.names) for t in tables])
    table = table.cast(NEIGHBORS_SCHEMA).combine_chunks()
    if table.num_rows == 0:
        return NEIGHBORS_SCHEMA.empty_table()
    ids, lists, values = (table[name].chunk(0) for name in NEIGHBORS_SCHEMA.names)
    queries = pc.unique(ids)
    queries = queries.take(pc.sort_indices(queries))
    parents = pc.list_parent_indices(lists)
    long = pa.table(
        {"q": ids.take(parents), "nb": pc.list_flatten(lists), "s": pc.list_flatten(values)}
    )
    # The same neighbour may come from several blocks (scores equal up to rounding): keep one.
    long = long.take(
        pc.sort_indices(long, [("q", "ascending"), ("nb", "ascending"), ("s", "descending")])
    )
    long = long.filter(_group_starts(long, ("q", "nb")))
    long = long.take(
        pc.sort_indices(long, [("q", "ascending"), ("s", "descending"), ("nb", "ascending")])
    )
    query = pc.index_in(long["q"], value_set=queries).to_numpy(zero_copy_only=False)
    position = np.arange(len(query))
    starts = np.ones(len(query), bool)
    starts[1:] = query[1:] != query[:-1]
    rank = position - np.maximum.accumulate(np.where(starts, position, 0))
    keep = rank < k
    long, query = long.filter(pa.array(keep)), query[keep]
    offsets = np.zeros(len(queries) + 1, np.int32)
    np.cumsum(np.bincount(query, minlength=len(queries)), out=offsets[1:])
    offsets = pa.array(offsets)
    return pa.Table.from_arrays(
        [
            queries,
            pa.ListArray.from_arrays(offsets, long["nb"].combine_chunks()),
            pa.ListArray.from_arrays(offsets, long["s"].combine_chunks()),
        ],
        schema=NEIGHBORS_SCHEMA,
    )


def merge_pairs(tables: Sequence[pa.Table]) -> pa.Table:
    """Pairs found in several blocks kept once (best score), sorted by ``(id_a, id_b)``."""
    table = pa.concat_tables([t.cast(PAIRS_SCHEMA) for t in tables]).combine_chunks()
    table = table.take(
        pc.sort_indices(
            table, [("id_a", "ascending"), ("id_b", "ascending"), ("score", "descending")]
        )
    )
    return table.filter(_group_starts(table, ("id_a", "id_b")))


def _group_starts(table: pa.Table, columns: tuple[str, ...]) -> pa.Array:
    """True where a row differs from the one before in any of ``columns`` (table sorted)."""
    n = table.num_rows
    starts = np.ones(n, bool)
    if n > 1:
        changed = np.zeros(n - 1, bool)
        for name in columns:
            column = table[name].combine_chunks()
            changed |= pc.not_equal(column.slice(1), column.slice(0, n - 1)).to_numpy(
                zero_copy_only=False
            )
        starts[1:] = changed
    return pa.array(starts)
