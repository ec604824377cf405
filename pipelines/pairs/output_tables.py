"""The pairs stage's output tables: ``neighbors/`` and ``pairs/`` Parquet, built from positions.

Output (docs/architecture.md, ``pairs/``), each folder a set of Parquet shards:

- ``neighbors/``: ``id``, ``neighbor_ids`` (list of ids, most similar first, equal scores by id),
  ``scores`` (their cosine similarities, float32); one row per embedded item.
- ``pairs/``: ``id_a < id_b`` (ids compared as strings, i.e. by code point), ``score``; each
  pair once.

Ids are the embeddings' ids, never positions. The reading side, for later stages and for
this stage's recall checks, is :mod:`sbert_pipeline.io.pairs_output`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from sbert_pipeline.vectors.cosine_range import clamp_cosines


def part_path(output: str, folder: str, index: int, count: int) -> str:
    """``OUTPUT/folder/part-SSSSS-of-NNNNN.parquet``."""
    return join(output, folder, f"part-{index:05d}-of-{count:05d}.parquet")


def neighbors_table(
    ids: pa.Array, rows: np.ndarray, indices: np.ndarray, scores: np.ndarray
) -> pa.Table:
    """A ``neighbors/`` table from positions: row ``rows[i]`` has neighbours ``indices[i]``.

    Args:
        ids: the id of every position (of the block or of all vectors).
        rows: ``(m,)`` positions of the items.
        indices: ``(m, k)`` neighbour positions (``k`` may be 0).
        scores: ``(m, k)`` float32.
    """
    m, k = indices.shape
    offsets = pa.array(np.arange(m + 1, dtype=np.int32) * np.int32(k))
    neighbor_ids = pa.ListArray.from_arrays(offsets, ids.take(pa.array(indices.reshape(-1))))
    values = pa.array(np.ascontiguousarray(clamp_cosines(scores)).reshape(-1), pa.float32())
    return pa.Table.from_arrays(
        [
            ids.take(pa.array(np.asarray(rows, np.int64))),
            neighbor_ids,
            pa.ListArray.from_arrays(offsets, values),
        ],
        schema=NEIGHBORS_SCHEMA,
    )


def pairs_table(ids: pa.Array, a: np.ndarray, b: np.ndarray, scores: np.ndarray) -> pa.Table:
    """A ``pairs/`` table from positions ``a < b`` into ascending ids (so ``id_a < id_b``)."""
    return pa.Table.from_arrays(
        [
            ids.take(pa.array(np.asarray(a, np.int64))),
            ids.take(pa.array(np.asarray(b, np.int64))),
            pa.array(clamp_cosines(scores), pa.float32()),
        ],
        schema=PAIRS_SCHEMA,
    )
