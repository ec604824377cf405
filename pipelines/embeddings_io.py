"""Reading ``embeddings/`` datasets back: shard lists, row counts, batches of vectors."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines.output_dir import join


def shard_paths(directory: str, prefix: str = "part") -> list[str]:
    """The Parquet shards ``{prefix}-*.parquet`` directly in ``directory``, sorted."""
    pattern = join(directory, f"{prefix}-*.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def count_rows(paths: list[str]) -> int:
    """Total rows of Parquet files, from their footers (no data is read)."""
    total = 0
    for path in paths:
        with FileSystems.open(path) as handle:
            total += pq.ParquetFile(handle).metadata.num_rows
    return total


def iter_embedding_batches(
    directory: str, *, columns: tuple[str, ...] = ("id", "embedding"), batch_size: int = 65536
) -> Iterator[pa.RecordBatch]:
    """Stream record batches from every shard, a bounded number of rows at a time."""
    for path in shard_paths(directory):
        with FileSystems.open(path) as handle:
            yield from pq.ParquetFile(handle).iter_batches(
                batch_size=batch_size, columns=list(columns)
            )


def embedding_matrix(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed-size-list embedding column as a float32 ``(N, d)`` array, without Python loops."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    dim = column.type.list_size
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(-1, dim).astype(np.float32, copy=False)
