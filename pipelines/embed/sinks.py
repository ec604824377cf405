"""Writing embeddings and errors as Parquet shards, on any runner.

``num_shards=None`` uses Beam's file sink (temporary files renamed on finalisation).
With ``num_shards=N``, rows are grouped into N shards by a stable hash of their id and each
shard is written by one ``process`` call to a deterministic name (temporary name, then rename):
a retried shard overwrites itself, so the result has no duplicates on any runner. The Dask
runner needs the second form because its sink finalisation sees no files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.parquetio import WriteToParquet, WriteToParquetBatched
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import PredictionResult
from sbert_pipeline.io.atomic import write_parquet_replacing
from sbert_pipeline.io.corpus_reader import RejectedRow
from sbert_pipeline.io.counters import METRICS_NAMESPACE
from sbert_pipeline.io.record_limits import COPY_OF
from sbert_pipeline.io.schemas import (
    ERRORS_DIR,
    ERRORS_SCHEMA,
    embeddings_schema,
    embeddings_table,
)
from sbert_pipeline.io.shards import stable_bucket


def output_schema(
    dim: int, dtype: str, keep_text: bool, keep_fields: tuple[str, ...], *, copy_of: bool = False
) -> pa.Schema:
    """The ``embeddings/`` schema for a job's options; ``copy_of`` (``--exact-dedup``) adds the
    nullable ``copy_of`` column last (pipelines/embed/exact_copies.py)."""
    names = (*keep_fields, COPY_OF) if copy_of else keep_fields
    extra = [pa.field(name, pa.string()) for name in names]
    return embeddings_schema(dim, dtype, with_text=keep_text, extra=extra)


class _ToTableFn(beam.DoFn):
    """Lists of PredictionResults -> one Arrow table each (numpy-stacked, no per-float objects)."""

    def __init__(
        self, dtype: str, keep_text: bool, keep_fields: tuple[str, ...], copy_of: bool = False
    ) -> None:
        self._dtype = dtype
        self._keep_text = keep_text
        self._keep_fields = keep_fields
        self._copy_of = copy_of
        self._embedded = Metrics.counter(METRICS_NAMESPACE, "embedded")
        self._truncated = Metrics.counter(METRICS_NAMESPACE, "truncated")
        self._tokens = Metrics.counter(METRICS_NAMESPACE, "tokens")

    def to_table(self, batch: list[PredictionResult]) -> pa.Table:
        records = [result.example for result in batch]
        n_tokens = np.fromiter((r.inference.n_tokens for r in batch), np.int32, len(batch))
        truncated = np.fromiter((r.inference.truncated for r in batch), bool, len(batch))
        self._embedded.inc(len(batch))
        self._truncated.inc(int(truncated.sum()))
        self._tokens.inc(int(n_tokens.sum()))
        extra = {
            name: [r.fields[position][1] for r in records]
            for position, name in enumerate(self._keep_fields)
        }
        if self._copy_of:
            extra[COPY_OF] = [getattr(r.inference, COPY_OF, None) for r in batch]
        return embeddings_table(
            [r.id for r in records],
            np.stack([result.inference.vector for result in batch]),  # (B, d)
            n_tokens,
            truncated,
            dtype=self._dtype,
            texts=[r.text for r in records] if self._keep_text else None,
            extra=extra,
        )

    def process(self, batch: list[PredictionResult]) -> Iterable[pa.Table]:
        yield self.to_table(batch)


class _WriteShardFn(beam.DoFn):
    """Writes one grouped shard to ``{prefix}-SSSSS-of-NNNNN.parquet`` in a single call."""

    def __init__(self, prefix: str, num_shards: int, to_table) -> None:
        self._prefix = prefix
        self._num_shards = num_shards
        self._to_table = to_table

    def process(self, keyed: tuple[int, Iterable]) -> Iterable[str]:
        shard, rows = keyed
        table = self._to_table(list(rows))
        final = f"{self._prefix}-{shard:05d}-of-{self._num_shards:05d}.parquet"
        write_parquet_replacing(final, [table], table.schema)  # a retry: same rows, replaced
        yield final


def _write_sharded(pcoll, prefix: str, n: int, key: Callable[[Any], str], to_table):
    """Group elements into ``n`` shards by a stable hash of ``key(element)`` and write each shard
    in one call (see the module docstring): a retried shard rewrites the same rows."""
    return (
        pcoll
        | "KeyByShard" >> beam.Map(lambda element: (stable_bucket(key(element), n), element))
        | "GroupShards" >> beam.GroupByKey()
        | "WriteShards" >> beam.ParDo(_WriteShardFn(prefix, n, to_table))
    )


def _result_id(result: PredictionResult) -> str:
    return result.example.id


def _row_source(row: RejectedRow) -> str:
    return row.source


def _errors_table(rows: list[RejectedRow]) -> pa.Table:
    return pa.Table.from_pylist([row.to_dict() for row in rows], schema=ERRORS_SCHEMA)


class WriteEmbeddings(beam.PTransform):
    """PredictionResult(record, Embedding) -> ``DIR/part-SSSSS-of-NNNNN.parquet``.

    With ``copy_of``, the schema's last column names each copy's representative
    (``CopiedEmbedding.copy_of``; null for the rows embedded themselves).
    """

    def __init__(
        self,
        directory: str,
        schema: pa.Schema,
        *,
        dtype: str,
        keep_text: bool,
        keep_fields: tuple[str, ...],
        num_shards: int | None = None,
        rows_per_table: int = 4096,
        copy_of: bool = False,
    ) -> None:
        super().__init__()
        self._prefix = FileSystems.join(directory, "part")
        self._schema = schema
        self._tables = _ToTableFn(dtype, keep_text, keep_fields, copy_of)
        self._num_shards = num_shards
        self._rows_per_table = rows_per_table

    def expand(self, results):
        if self._num_shards is not None:
            shards = self._num_shards
            return _write_sharded(results, self._prefix, shards, _result_id, self._tables.to_table)
        return (
            results
            | "BatchForWrite"
            >> beam.BatchElements(
                min_batch_size=self._rows_per_table // 4, max_batch_size=self._rows_per_table
            )
            | "ToArrow" >> beam.ParDo(self._tables)
            | "WriteParquet"
            >> WriteToParquetBatched(self._prefix, schema=self._schema, file_name_suffix=".parquet")
        )


class WriteErrors(beam.PTransform):
    """RejectedRow -> ``DIR/<ERRORS_DIR>/part-*.parquet`` (id, source, reason, excerpt)."""

    def __init__(self, directory: str, *, num_shards: int | None = None) -> None:
        super().__init__()
        self._prefix = FileSystems.join(directory, ERRORS_DIR, "part")
        self._num_shards = num_shards

    def expand(self, rejected):
        if self._num_shards is not None:
            shards = self._num_shards
            return _write_sharded(rejected, self._prefix, shards, _row_source, _errors_table)
        return (
            rejected
            | "ToErrorRows" >> beam.Map(RejectedRow.to_dict)
            | "WriteErrorsParquet"
            >> WriteToParquet(self._prefix, schema=ERRORS_SCHEMA, file_name_suffix=".parquet")
        )
