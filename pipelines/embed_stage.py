"""The embed stage as Beam transforms: ReadCorpus -> RejectDuplicateIds -> Embed -> Write.

Labels are stable CamelCase names, so a Dataflow job can be updated and its graph reads like
DESIGN.md. Every row read ends up either in the embeddings or in ``errors/`` with a reason.
"""

from __future__ import annotations

import bz2
import gzip
import posixpath
from collections.abc import Iterator
from typing import BinaryIO

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.parquetio import WriteToParquet, WriteToParquetBatched
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import PredictionResult, RunInference

from pipelines.corpus_reader import CorpusRecord, CorpusSpec, RejectedRow, read_corpus_file
from pipelines.model_handler import SbertModelHandler
from pipelines.schemas import embeddings_schema, embeddings_table

METRICS_NAMESPACE = "sbert"
RECORDS, REJECTED = "records", "rejected"
ERRORS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("source", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("excerpt", pa.string()),
    ]
)


def match_corpus(pattern: str) -> list[tuple[str, str]]:
    """Files matching ``pattern`` as ``(path, id_prefix)``, sorted; raises if none match.

    The id prefix is the path relative to the pattern's fixed directory part, so ids stay the
    same when the corpus is read again from the same place.
    """
    matched = sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)
    if not matched:
        raise FileNotFoundError(f"no input files match {pattern}")
    fixed = pattern.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
    base = fixed if fixed.endswith("/") else posixpath.dirname(fixed) + "/"
    return [
        (path, path[len(base) :] if path.startswith(base) else posixpath.basename(path))
        for path in matched
    ]


def open_decompressed(path: str) -> BinaryIO:
    """Open a file on any Beam filesystem as a buffered binary stream, gunzipping ``.gz``/``.bz2``.

    Beam's own ``CompressedFile`` lacks parts of the ``io`` interface that ``TextIOWrapper``
    needs, so decompression uses the standard library on top of the raw stream.
    """
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if path.endswith(".bz2"):
        return bz2.BZ2File(raw, mode="rb")
    return raw


class _ReadFileFn(beam.DoFn):
    """Reads one corpus file; good rows to the main output, bad rows tagged ``rejected``."""

    def __init__(self, spec: CorpusSpec) -> None:
        self._spec = spec
        self._read = Metrics.counter(METRICS_NAMESPACE, "read")
        self._rejected = Metrics.counter(METRICS_NAMESPACE, "rejected")

    def process(self, file: tuple[str, str]) -> Iterator:
        path, id_prefix = file
        with open_decompressed(path) as stream:
            for item in read_corpus_file(stream, path, self._spec, id_prefix):
                self._read.inc()
                if isinstance(item, RejectedRow):
                    self._rejected.inc()
                    yield beam.pvalue.TaggedOutput(REJECTED, item)
                else:
                    yield item


class ReadCorpus(beam.PTransform):
    """Glob of corpus files -> ``{"records": CorpusRecord, "rejected": RejectedRow}``.

    Files are matched when the pipeline is built and read one per element, so the transform
    uses only Create and ParDo (which every runner, Dask included, translates).
    """

    def __init__(self, pattern: str, spec: CorpusSpec) -> None:
        super().__init__()
        self._files = match_corpus(pattern)
        self._spec = spec

    def expand(self, pbegin):
        outputs = (
            pbegin
            | "ListFiles" >> beam.Create(self._files, reshuffle=False)
            | "ReadFiles"
            >> beam.ParDo(_ReadFileFn(self._spec)).with_outputs(REJECTED, main=RECORDS)
        )
        return {RECORDS: outputs[RECORDS], REJECTED: outputs[REJECTED]}


def _source_order(record: CorpusRecord) -> tuple[str, int]:
    path, _, row = record.source.rpartition(":")
    return path, int(row) if row.isdigit() else -1


class _SplitDuplicatesFn(beam.DoFn):
    def __init__(self) -> None:
        self._rejected = Metrics.counter(METRICS_NAMESPACE, "rejected")

    def process(self, keyed: tuple[str, list[CorpusRecord]]) -> Iterator:
        _, records = keyed
        first, *others = sorted(records, key=_source_order)
        yield first
        for record in others:
            self._rejected.inc()
            reason = f"duplicate id (first seen at {first.source})"
            yield beam.pvalue.TaggedOutput(
                REJECTED, RejectedRow(record.id, record.source, reason, record.text[:200])
            )


class RejectDuplicateIds(beam.PTransform):
    """Keeps the first record of each id (in file, row order); later ones are rejected.

    The grouping also redistributes records across workers, like a Reshuffle.
    """

    def expand(self, records):
        outputs = (
            records
            | "KeyById" >> beam.Map(lambda record: (record.id, record))
            | "GroupById" >> beam.GroupByKey()
            | "KeepFirst" >> beam.ParDo(_SplitDuplicatesFn()).with_outputs(REJECTED, main=RECORDS)
        )
        return {RECORDS: outputs[RECORDS], REJECTED: outputs[REJECTED]}


class _ToArrowFn(beam.DoFn):
    """Batches of PredictionResults -> one Arrow table each, built from stacked numpy arrays."""

    def __init__(self, dtype: str, keep_text: bool, keep_fields: tuple[str, ...]) -> None:
        self._dtype = dtype
        self._keep_text = keep_text
        self._keep_fields = keep_fields
        self._embedded = Metrics.counter(METRICS_NAMESPACE, "embedded")
        self._truncated = Metrics.counter(METRICS_NAMESPACE, "truncated")
        self._tokens = Metrics.counter(METRICS_NAMESPACE, "tokens")

    def process(self, batch: list[PredictionResult]) -> Iterator[pa.Table]:
        records = [result.example for result in batch]
        n_tokens = np.fromiter((r.inference.n_tokens for r in batch), np.int32, len(batch))
        truncated = np.fromiter((r.inference.truncated for r in batch), bool, len(batch))
        self._embedded.inc(len(batch))
        self._truncated.inc(int(truncated.sum()))
        self._tokens.inc(int(n_tokens.sum()))
        yield embeddings_table(
            [r.id for r in records],
            np.stack([result.inference.vector for result in batch]),  # (B, d)
            n_tokens,
            truncated,
            dtype=self._dtype,
            texts=[r.text for r in records] if self._keep_text else None,
            extra={
                name: [r.fields[position][1] for r in records]
                for position, name in enumerate(self._keep_fields)
            },
        )


def _failed_batch_to_rejections(failure) -> Iterator[RejectedRow]:
    batch, error = failure
    reason = f"inference failed: {type(error).__name__}: {str(error)[:300]}"
    for record in batch:
        yield RejectedRow(record.id, record.source, reason, record.text[:200])


class Embed(beam.PTransform):
    """Records -> ``{"tables": pa.Table batches, "rejected": RejectedRow}`` via RunInference.

    A ``Reshuffle`` first, so inference parallelism is not fused to the reader's (one file per
    worker); failed inference batches become rejections rather than failing the job.
    """

    def __init__(
        self,
        handler: SbertModelHandler,
        *,
        dtype: str,
        keep_text: bool,
        keep_fields: tuple[str, ...],
        reshuffle: bool = True,
        write_batch_size: int = 4096,
    ) -> None:
        super().__init__()
        self._handler = handler
        self._dtype = dtype
        self._keep_text = keep_text
        self._keep_fields = keep_fields
        self._reshuffle = reshuffle
        self._write_batch_size = write_batch_size

    def expand(self, records):
        if self._reshuffle:
            records = records | "Reshuffle" >> beam.Reshuffle()
        results, failures = (
            records | "RunInference" >> RunInference(self._handler).with_exception_handling()
        )
        tables = (
            results
            | "BatchForWrite"
            >> beam.BatchElements(
                min_batch_size=self._write_batch_size // 4, max_batch_size=self._write_batch_size
            )
            | "ToArrow" >> beam.ParDo(_ToArrowFn(self._dtype, self._keep_text, self._keep_fields))
        )
        rejected = failures.failed_inferences | "FailedBatches" >> beam.FlatMap(
            _failed_batch_to_rejections
        )
        return {"tables": tables, REJECTED: rejected}


def output_schema(dim: int, dtype: str, keep_text: bool, keep_fields: tuple[str, ...]) -> pa.Schema:
    """The ``embeddings/`` schema for this job's options."""
    extra = [pa.field(name, pa.string()) for name in keep_fields]
    return embeddings_schema(dim, dtype, with_text=keep_text, extra=extra)


class WriteEmbeddings(beam.PTransform):
    """Arrow tables -> ``DIR/part-SSSSS-of-NNNNN.parquet`` via Beam's sink (temp, then rename)."""

    def __init__(self, directory: str, schema: pa.Schema) -> None:
        super().__init__()
        self._directory = directory
        self._schema = schema

    def expand(self, tables):
        return tables | "WriteParquet" >> WriteToParquetBatched(
            FileSystems.join(self._directory, "part"),
            schema=self._schema,
            file_name_suffix=".parquet",
        )


class WriteErrors(beam.PTransform):
    """Rejections -> ``DIR/errors/part-*.parquet`` (id, source, reason, excerpt)."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self._directory = directory

    def expand(self, rejected):
        return (
            rejected
            | "ToErrorRows" >> beam.Map(RejectedRow.to_dict)
            | "WriteErrorsParquet"
            >> WriteToParquet(
                FileSystems.join(self._directory, "errors", "part"),
                schema=ERRORS_SCHEMA,
                file_name_suffix=".parquet",
            )
        )
