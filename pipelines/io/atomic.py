"""Files that appear whole: written under a temporary name, then renamed into place."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems


def write_parquet_replacing(path: str, tables: Iterator[pa.Table], schema: pa.Schema) -> int:
    """Write tables as one Parquet file under a temporary name, then rename it to ``path``.

    Returns the number of rows. A file already at ``path`` (an earlier attempt of the same shard)
    is replaced, so a retried shard never duplicates rows.
    """
    staging = f"{path}.{uuid.uuid4().hex}.tmp"
    rows = 0
    with FileSystems.create(staging) as handle, pq.ParquetWriter(handle, schema) as writer:
        for table in tables:
            writer.write_table(table)
            rows += table.num_rows
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([staging], [path])
    return rows
