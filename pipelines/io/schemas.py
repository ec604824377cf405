"""Explicit Arrow schemas for the Parquet files this project writes.

See docs/architecture.md, folder contracts.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

EMBEDDING_DTYPES = {"float32": pa.float32(), "float16": pa.float16()}


def embeddings_schema(
    dim: int,
    dtype: str = "float32",
    *,
    with_text: bool = False,
    extra: list[pa.Field] | None = None,
) -> pa.Schema:
    """Schema of ``embeddings/`` shards: id, embedding, n_tokens, truncated, [text], [extra]."""
    if dtype not in EMBEDDING_DTYPES:
        raise ValueError(
            f"embedding dtype must be one of {', '.join(EMBEDDING_DTYPES)}, got {dtype!r}"
        )
    fields = [
        pa.field("id", pa.string(), nullable=False),
        pa.field("embedding", pa.list_(EMBEDDING_DTYPES[dtype], dim), nullable=False),
        pa.field("n_tokens", pa.int32(), nullable=False),
        pa.field("truncated", pa.bool_(), nullable=False),
    ]
    if with_text:
        fields.append(pa.field("text", pa.string()))
    return pa.schema(fields + list(extra or []))


def embeddings_table(
    ids: list[str],
    embeddings: np.ndarray,
    n_tokens: np.ndarray,
    truncated: np.ndarray,
    *,
    dtype: str = "float32",
    texts: list[str] | None = None,
    extra: dict[str, list[str | None]] | None = None,
) -> pa.Table:
    """Build an ``embeddings/`` table from columns, without a Python object per vector.

    ``extra`` holds pass-through string columns, in schema order after ``text``.
    """
    extra = extra or {}
    schema = embeddings_schema(
        embeddings.shape[1],
        dtype,
        with_text=texts is not None,
        extra=[pa.field(name, pa.string()) for name in extra],
    )
    flat = pa.array(np.ascontiguousarray(embeddings, dtype=np.dtype(dtype)).reshape(-1))
    columns = [
        pa.array(ids, pa.string()),
        pa.FixedSizeListArray.from_arrays(flat, embeddings.shape[1]),
        pa.array(np.asarray(n_tokens, dtype=np.int32)),
        pa.array(np.asarray(truncated, dtype=bool)),
    ]
    if texts is not None:
        columns.append(pa.array(texts, pa.string()))
    columns.extend(pa.array(values, pa.string()) for values in extra.values())
    return pa.Table.from_arrays(columns, schema=schema)


NEIGHBORS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        # Most similar first; equal scores by id. Shorter than k only where fewer items were
        # searched (clustered mode: the item's cluster blocks held fewer than k others).
        pa.field("neighbor_ids", pa.list_(pa.string()), nullable=False),
        pa.field("scores", pa.list_(pa.float32()), nullable=False),
    ]
)

PAIRS_SCHEMA = pa.schema(
    [
        pa.field("id_a", pa.string(), nullable=False),  # id_a < id_b
        pa.field("id_b", pa.string(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),
    ]
)


# The dead letters' folder inside an embeddings output (docs/architecture.md). Its leading
# underscore makes dataset readers of the embeddings folder skip it (pandas, pyarrow.dataset and
# Spark skip names starting with "_" or "."; DuckDB's and polars' "dir/*.parquet" do not descend).
ERRORS_DIR = "_errors"
# Where versions before issue 16 put them: still read (dedup) and still recognised as ours
# (--overwrite, clearing a killed run's remains).
LEGACY_ERRORS_DIRS = ("errors",)

ERRORS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("source", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("excerpt", pa.string()),
    ]
)
