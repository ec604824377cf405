"""The clustered mode's vectors on temporary disk, stored once: one raw float32 file of
``(rows, d)`` per embeddings shard, rows in the shard's order, read back by row number.

A vector joins ``nprobe`` blocks; its block groups name it by ``(source shard, row)`` and the
worker that searches a group gathers the rows it needs from these files
(:func:`read_rows_at`), so temporary disk holds each vector once, not ``nprobe`` times. Locally
the file is memory-mapped (the page cache serves the groups that read it in turn); on other
filesystems it is read whole, one shard at a time.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from sbert_pipeline.io.atomic import is_local_path, local_replacing, replace, staging_path
from sbert_pipeline.io.filesystems import FileSystems

FLOAT32 = np.dtype("<f4")


def write_rows(path: str, batches: Iterable[np.ndarray]) -> int:
    """Write ``(b, d)`` float32 batches one after another to ``path`` (whole or not at all, a
    file already there replaced, so a retried shard rewrites its own file); returns the rows."""
    rows = 0
    if is_local_path(path):
        with local_replacing(path) as temporary, open(temporary, "wb") as stream:
            for batch in batches:
                stream.write(np.ascontiguousarray(batch, FLOAT32).tobytes())
                rows += len(batch)
        return rows
    staging = staging_path(path)
    with FileSystems.create(staging, mime_type="application/octet-stream") as handle:
        for batch in batches:
            handle.write(np.ascontiguousarray(batch, FLOAT32).tobytes())
            rows += len(batch)
    replace(staging, path)
    return rows


def read_rows_at(
    path: str, dim: int, rows: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """Rows ``rows`` (row numbers, any order) of the ``(n, dim)`` float32 file at ``path``, as a
    new ``(len(rows), dim)`` array, or written into ``out`` when given.

    Raises:
        ValueError: the file's size is not a whole number of rows, or a row number is outside it.
    """
    rows = np.asarray(rows, np.int64)
    if is_local_path(path):
        stored = np.memmap(path.removeprefix("file://"), FLOAT32, mode="r")
    else:
        with FileSystems.open(path, mime_type="application/octet-stream") as handle:
            stored = np.frombuffer(handle.read(), FLOAT32)
    if len(stored) % dim:
        raise ValueError(f"{path}: {len(stored) * 4} bytes is not a whole number of {dim}-d rows")
    matrix = stored.reshape(-1, dim)
    if len(rows) and (rows.min() < 0 or rows.max() >= len(matrix)):
        raise ValueError(f"{path}: row {int(rows.max())} asked of a file of {len(matrix)} rows")
    if out is None:
        return matrix[rows]
    np.take(matrix, rows, axis=0, out=out)
    return out
