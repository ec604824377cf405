"""The cluster stage's Beam transform and the launcher-side reads and writes around it.

The fit runs in the launcher on a sample (:func:`sample_embeddings`, then
:func:`sbert_pipeline.vectors.kmeans.fit_spherical_kmeans`); the centroids are written to
``centroids.npy``; then :class:`AssignClusters` assigns every embedding in Beam. Each worker loads
the centroids once (``DoFn.setup``) and turns one embeddings shard into one ``assignments/`` shard
with a deterministic name, written under a temporary name and renamed: a retried shard replaces
itself, no sink finalisation is involved, and the pipeline is a single chain (one leaf), so it runs
the same on the FnApiRunner, Dataflow, Spark, Flink and Dask.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from sbert_pipeline.io.atomic import write_parquet_replacing
from sbert_pipeline.io.centroids import load_centroids
from sbert_pipeline.io.counters import METRICS_NAMESPACE
from sbert_pipeline.io.embeddings import (
    EmbeddingsDataset,
    all_shards,
    embedding_matrix,
    shard_paths,
    stream_parquet,
)
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.vectors.cosine_range import clamp_cosines
from sbert_pipeline.vectors.kmeans import assign
from sbert_pipeline.vectors.precision import Precision, normalize_rows
from sbert_pipeline.vectors.progress import shared_progress
from sbert_pipeline.vectors.sampling import sample_rows

ASSIGNMENTS = "assignments"
# The progress bar every assignment DoFn in this process counts its batches on.
ASSIGN_PROGRESS = "cluster assign"

ASSIGNMENTS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        # -1: in no cluster (communities only: items no community took).
        pa.field("cluster", pa.int32(), nullable=False),
        # Cosine similarity to the cluster's centre; null exactly when cluster is -1.
        pa.field("score", pa.float32()),
    ]
)


def assignments_table(
    ids: Sequence[str] | pa.Array, labels: np.ndarray, scores: np.ndarray
) -> pa.Table:
    """An ``assignments/`` table; rows with a negative label get a null score."""
    labels = np.asarray(labels)
    id_array = ids if isinstance(ids, pa.Array) else pa.array(ids, pa.string())
    scores = pa.array(clamp_cosines(scores), mask=labels < 0)
    return pa.Table.from_arrays(
        [id_array, pa.array(labels.astype(np.int32)), scores], schema=ASSIGNMENTS_SCHEMA
    )


def shard_name(directory: str, index: int, count: int) -> str:
    """``DIR/assignments/part-SSSSS-of-NNNNN.parquet``."""
    return join(directory, ASSIGNMENTS, f"part-{index:05d}-of-{count:05d}.parquet")


def assign_shard(
    path: str, centroids: np.ndarray, batch_size: int = 65536, precision: Precision = "auto"
) -> Iterator[pa.Table]:
    """``assignments/`` tables of one embeddings shard: each row's nearest centroid, read and
    assigned ``batch_size`` rows at a time."""
    with FileSystems.open(path) as handle:
        for batch in stream_parquet(handle).iter_batches(
            batch_size=batch_size, columns=["id", "embedding"]
        ):
            vectors = normalize_rows(embedding_matrix(batch.column("embedding")))
            result = assign(vectors, centroids, precision=precision)
            yield assignments_table(batch.column("id"), result.labels, result.scores)


class _AssignShardFn(beam.DoFn):
    """``(index, embeddings shard)`` -> ``assignments/part-index-of-count.parquet``."""

    def __init__(
        self,
        centroids_path: str,
        output: str,
        count: int,
        batch_size: int,
        precision: Precision,
        total: int | None,
    ) -> None:
        self._centroids_path = centroids_path
        self._output = output
        self._count = count
        self._batch_size = batch_size
        self._precision = precision
        self._total = total
        self._centroids: np.ndarray | None = None
        self._assigned = Metrics.counter(METRICS_NAMESPACE, "assigned")

    def setup(self) -> None:
        self._centroids = load_centroids(self._centroids_path)

    def _tables(self, path: str) -> Iterator[pa.Table]:
        # Shown only where this process shows progress (a local runner's in-process workers).
        bar = shared_progress(ASSIGN_PROGRESS, "vectors", self._total)
        for table in assign_shard(path, self._centroids, self._batch_size, self._precision):
            self._assigned.inc(table.num_rows)
            bar.update(table.num_rows)
            yield table

    def process(self, item: tuple[int, str]) -> Iterator[tuple[str, int]]:
        index, path = item
        target = shard_name(self._output, index, self._count)
        yield target, write_parquet_replacing(target, self._tables(path), ASSIGNMENTS_SCHEMA)


class AssignClusters(beam.PTransform):
    """Every embedding -> its nearest centroid, one ``assignments/`` shard per embeddings shard.

    Args:
        shards: embeddings Parquet shards (all input directories, in a fixed order).
        centroids_path: ``centroids.npy`` written by the launcher.
        output: the cluster output directory.
        batch_size: rows read and assigned at a time (bounds worker memory).
        precision: see :func:`sbert_pipeline.vectors.kmeans.assign`; labels are fp32-exact either
        way. total: rows in all shards, for the progress bar's ETA.

    Emits ``(assignments shard path, rows)`` per shard.
    """

    def __init__(
        self,
        shards: Sequence[str],
        centroids_path: str,
        output: str,
        *,
        batch_size: int = 65536,
        precision: Precision = "auto",
        total: int | None = None,
    ) -> None:
        super().__init__()
        self._shards = list(shards)
        self._fn = _AssignShardFn(centroids_path, output, len(shards), batch_size, precision, total)

    def expand(self, pbegin):
        return (
            pbegin
            | "ListShards" >> beam.Create(list(enumerate(self._shards)))
            # Spread shards over workers; Create alone would keep them on one.
            | "SpreadShards" >> beam.Reshuffle()
            | "AssignShards" >> beam.ParDo(self._fn)
        )


def sample_embeddings(
    datasets: Sequence[EmbeddingsDataset], size: int, seed: int, batch_size: int = 65536
) -> tuple[list[str], np.ndarray]:
    """A uniform random sample of ``size`` rows without replacement, streamed from disk.

    Rows are numbered across all inputs in shard order; the chosen row numbers depend only on
    the total count, ``size`` and ``seed``, so the sample is the same on every rerun.
    """
    total = sum(dataset.count for dataset in datasets)
    chosen = sample_rows(total, size, seed)
    ids: list[str] = []
    # Filled in place: one copy of the sample, not its parts plus their concatenation.
    sample = np.empty((len(chosen), datasets[0].dim), np.float32)
    offset = 0
    for dataset in datasets:
        for batch_ids, vectors in dataset.batches(batch_size):
            lo, hi = np.searchsorted(chosen, [offset, offset + len(batch_ids)])
            local = chosen[lo:hi] - offset
            ids.extend(batch_ids[i] for i in local)
            sample[lo:hi] = vectors[local]
            offset += len(batch_ids)
    if len(ids) != len(chosen):
        raise ValueError(f"the embeddings ended after {offset} rows; expected {total}")
    return ids, sample


def read_assignments(output: str) -> pa.Table:
    """All ``assignments/`` shards of an output directory as one table."""
    tables = []
    for path in shard_paths(join(output, ASSIGNMENTS)):
        with FileSystems.open(path) as handle:
            tables.append(pq.read_table(handle, schema=ASSIGNMENTS_SCHEMA))
    return pa.concat_tables(tables) if tables else ASSIGNMENTS_SCHEMA.empty_table()


def write_assignments(
    output: str,
    datasets: Sequence[EmbeddingsDataset],
    ids: Sequence[str],
    labels: np.ndarray,
    scores: np.ndarray,
) -> None:
    """Write assignments computed in the launcher, one shard per embeddings shard (row-aligned).

    Used when the clustering itself needs all vectors at once (communities), so that the output
    has the same layout as the Beam assignment's.
    """
    shards = all_shards(datasets)
    start = 0
    for index, path in enumerate(shards):
        with FileSystems.open(path) as handle:
            rows = pq.ParquetFile(handle).metadata.num_rows
        end = start + rows
        table = assignments_table(ids[start:end], labels[start:end], scores[start:end])
        write_parquet_replacing(shard_name(output, index, len(shards)), iter([table]), table.schema)
        start = end
