"""Sharded index build in Beam, for corpora too large to add on one machine in one pass.

1. Launcher, :func:`prepare_sharded_build`: train the empty index once on a sample (the same
   ``index_build.train_on_sample`` as the single-process build), write it and the held-out
   queries to ``OUTPUT/_work/``, and cut the rows into contiguous ranges, one per shard.
2. Beam, :class:`BuildIndexShards`: one element per row range; a worker clones the trained
   index, adds its rows except the held-out ones (on its GPU when it has one), writes
   ``OUTPUT/shards/index-SSSSS-of-NNNNN.faiss``, and writes its share of the exact answer
   for the held-out queries (the top-k over its rows) so no machine scans the whole corpus.
3. Launcher, :func:`finish_sharded_build`: merge the shards in row order into ``index.faiss``
   (IVF lists and flat codes merge), or keep them as shards searched together through
   ``faiss.IndexShards`` (HNSW graphs do not merge); combine the exact partial answers, tune
   and measure as the single-process build does, then add the held-out rows last (a last
   shard ``shards/held-out.faiss`` when unmerged). Index positions are therefore the same as
   in the single-process build (``index_build.index_order``).

The pipeline is Create -> Reshuffle -> FillShards, a single leaf, so runners that only compute
the last transform's lineage (Dask) run all of it. Every worker write goes to a temporary name
and is renamed, so a retried shard replaces itself.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import apache_beam as beam
import faiss
import numpy as np
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from sbert_pipeline.index.build import (
    BuildSettings,
    BuiltIndex,
    TrainedIndex,
    fill_index,
    finish_build,
    skip_rows,
    train_on_sample,
)
from sbert_pipeline.index.faiss_ops import set_search_params
from sbert_pipeline.index.files import (
    INDEX_FILE,
    SHARDS_DIR,
    FileDigest,
    read_index_file,
    shard_file_name,
    write_index_file,
)
from sbert_pipeline.index.tuning import RECALL_K
from sbert_pipeline.io.atomic import (
    replace,
    staging_path,
    write_bytes_replacing,
    write_json_replacing,
)
from sbert_pipeline.io.embeddings import EmbeddingsDataset, embedding_matrix, stream_parquet
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.vectors.checks import require_finite
from sbert_pipeline.vectors.exact_truth import ExactTopK

WORK_DIR = "_work"
HELD_OUT_SHARD = f"{SHARDS_DIR}/held-out.faiss"
METRICS_NAMESPACE = "sbert_index"


class IncompleteShardsError(RuntimeError):
    """The pipeline finished but a shard's files are missing or disagree with its row range."""


@dataclass(frozen=True)
class ShardTask:
    """Rows ``[start, stop)`` of the corpus and the Parquet files that hold them.

    Attributes:
        files: each overlapping file with the corpus row of its first row.
        held_out: corpus rows in the range that are held out (added last by the launcher).
        first_position: index position of the shard's first added row.
    """

    shard: int
    n_shards: int
    start: int
    stop: int
    files: tuple[tuple[str, int], ...]
    held_out: tuple[int, ...] = ()
    first_position: int = 0

    @property
    def size(self) -> int:
        """Vectors the shard adds."""
        return self.stop - self.start - len(self.held_out)


@dataclass(frozen=True)
class ShardedBuild:
    """Everything a worker needs, all plain values (it is pickled into the pipeline)."""

    output: str
    settings: BuildSettings
    tasks: tuple[ShardTask, ...]
    n_rows: int

    @property
    def work_dir(self) -> str:
        """Scratch space inside the output directory, removed on success."""
        return join(self.output, WORK_DIR)

    @property
    def trained_path(self) -> str:
        """The trained, empty index every shard starts from."""
        return join(self.work_dir, "trained.faiss")

    @property
    def queries_path(self) -> str:
        """The held-out queries (prepared for the metric) as ``.npy``."""
        return join(self.work_dir, "queries.npy")

    def exact_path(self, shard: int) -> str:
        """A shard's exact top-k for the queries (``.npz``: distances, positions)."""
        return join(self.work_dir, f"exact-{shard:05d}.npz")

    def report_path(self, shard: int) -> str:
        """A shard's report: file name, size, sha256, rows, device."""
        return join(self.work_dir, f"shard-{shard:05d}.json")


def plan_shards(
    paths: list[str], n_shards: int, held_out: np.ndarray | None = None
) -> tuple[tuple[ShardTask, ...], int]:
    """Cut the rows of ``paths`` into ``n_shards`` contiguous ranges of near-equal size.

    Args:
        paths: Parquet files in corpus order.
        n_shards: ranges wanted.
        held_out: sorted corpus rows the shards skip.

    Returns:
        ``(tasks, total_rows)``; fewer tasks than asked when there are fewer rows than shards.
    """
    held_out = np.zeros(0, np.int64) if held_out is None else np.asarray(held_out, np.int64)
    if n_shards < 1:
        raise ValueError(f"--shards must be at least 1, got {n_shards}")
    firsts, total = [], 0
    for path in paths:
        with FileSystems.open(path) as handle:
            rows = pq.ParquetFile(handle).metadata.num_rows
        firsts.append((path, total, rows))
        total += rows
    n_shards = max(1, min(n_shards, total))
    bounds = np.linspace(0, total, n_shards + 1).round().astype(np.int64)
    tasks = []
    for shard in range(n_shards):
        start, stop = int(bounds[shard]), int(bounds[shard + 1])
        files = tuple(
            (path, first) for path, first, rows in firsts if first < stop and first + rows > start
        )
        lo, hi = np.searchsorted(held_out, [start, stop])
        tasks.append(
            ShardTask(
                shard,
                n_shards,
                start,
                stop,
                files,
                held_out=tuple(held_out[lo:hi].tolist()),
                first_position=start - int(lo),
            )
        )
    return tuple(tasks), total


def read_row_range(task: ShardTask, batch_size: int) -> Iterator[np.ndarray]:
    """The embeddings of rows ``[task.start, task.stop)`` as float32 batches, in row order.

    Row groups outside the range are skipped using the Parquet footer, not read.

    Raises:
        NonFiniteEmbeddingError: a row holds NaN or infinite values, naming its id and file.
    """
    for path, file_first in task.files:
        with FileSystems.open(path) as handle:
            parquet = stream_parquet(handle)
            group_first = file_first
            for group in range(parquet.num_row_groups):
                group_rows = parquet.metadata.row_group(group).num_rows
                batch_first, group_first = group_first, group_first + group_rows
                if group_first <= task.start or batch_first >= task.stop:
                    continue
                for batch in parquet.iter_batches(
                    batch_size=batch_size, row_groups=[group], columns=["id", "embedding"]
                ):
                    lo = max(task.start - batch_first, 0)
                    hi = min(task.stop - batch_first, batch.num_rows)
                    batch_first += batch.num_rows
                    if hi > lo:
                        vectors = embedding_matrix(batch.column("embedding").slice(lo, hi - lo))
                        require_finite(vectors, batch.column("id").slice(lo, hi - lo), where=path)
                        yield vectors


def _read_bytes(path: str) -> bytes:
    with FileSystems.open(path) as handle:
        return handle.read()


def prepare_sharded_build(
    data: EmbeddingsDataset, output: str, settings: BuildSettings, n_shards: int
) -> tuple[ShardedBuild, TrainedIndex]:
    """Train once on a sample and stage what the workers read; see the module docstring."""
    trained = train_on_sample(data, settings)
    tasks, n_rows = plan_shards(list(data.shards), n_shards, trained.held_out)
    build = ShardedBuild(output, settings, tasks, n_rows)
    FileSystems.mkdirs(build.work_dir)
    write_index_file(trained.index, build.trained_path)
    buffer = io.BytesIO()
    np.save(buffer, trained.queries, allow_pickle=False)
    write_bytes_replacing(build.queries_path, buffer.getvalue())
    return build, trained


class _FillShardFn(beam.DoFn):
    """Adds one row range to a copy of the trained index and writes the shard's files."""

    def __init__(self, build: ShardedBuild) -> None:
        self._build = build
        self._added = Metrics.counter(METRICS_NAMESPACE, "vectors_added")

    def setup(self) -> None:
        # Read once per worker process, not pickled with the DoFn: the trained index of a
        # large IVF holds nlist·d floats.
        self._trained = read_index_file(self._build.trained_path)
        self._queries = np.load(io.BytesIO(_read_bytes(self._build.queries_path)))

    def process(self, task: ShardTask) -> Iterator[str]:
        build, settings = self._build, self._build.settings
        exact = ExactTopK(
            self._queries,
            RECALL_K,
            metric=settings.metric,
            offset=task.first_position,
            kernel="faiss",
        )
        batches = read_row_range(task, settings.batch_size)
        index, device = fill_index(
            faiss.clone_index(self._trained),
            skip_rows(batches, np.asarray(task.held_out, np.int64), first_row=task.start),
            settings.metric,
            use_gpu=settings.gpu(),
            exact=exact,
        )
        if index.ntotal != task.size:
            raise IncompleteShardsError(
                f"shard {task.shard}: added {index.ntotal} rows, expected {task.size} from "
                f"[{task.start}, {task.stop})"
            )
        name = shard_file_name(task.shard, task.n_shards)
        final = join(build.output, name)
        staging = staging_path(final)
        size, sha256 = write_index_file(index, staging)
        replace(staging, final)

        distances, positions = exact.result()
        buffer = io.BytesIO()
        np.savez(buffer, distances=distances, positions=positions)
        write_bytes_replacing(build.exact_path(task.shard), buffer.getvalue())

        report = {
            "name": name,
            "size": size,
            "sha256": sha256,
            "rows": int(index.ntotal),
            "device": device,
        }
        write_json_replacing(build.report_path(task.shard), report)
        self._added.inc(int(index.ntotal))
        yield name


class BuildIndexShards(beam.PTransform):
    """PBegin -> one shard file name per row range (written under ``OUTPUT/shards/``).

    Example:
        >>> build, trained = prepare_sharded_build(data, "out/index", settings, n_shards=4)
        >>> with beam.Pipeline() as p:
        ...     _ = p | "BuildIndexShards" >> BuildIndexShards(build)
        >>> built, files = finish_sharded_build(build, trained)
    """

    def __init__(self, build: ShardedBuild) -> None:
        super().__init__()
        self._build = build

    def expand(self, pbegin):
        return (
            pbegin
            | "ShardTasks" >> beam.Create(list(self._build.tasks))
            # One worker per shard instead of all shards in the bundle that created them.
            | "SpreadShards" >> beam.Reshuffle()
            | "FillShards" >> beam.ParDo(_FillShardFn(self._build))
        )


def mergeable(index: faiss.Index) -> bool:
    """Whether shards of this index type merge into one (IVF lists, flat codes) or not (HNSW)."""
    if faiss.try_extract_index_ivf(index) is not None:
        return True
    base = (
        faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
    )
    return isinstance(faiss.downcast_index(base), faiss.IndexFlatCodes)


def _shard_reports(build: ShardedBuild) -> list[dict]:
    reports = []
    for task in build.tasks:
        path = build.report_path(task.shard)
        if not FileSystems.exists(path):
            raise IncompleteShardsError(
                f"shard {task.shard} of {len(build.tasks)} left no report ({path}): the "
                "pipeline lost it; rerun the job"
            )
        report = json.loads(_read_bytes(path).decode("utf-8"))
        if report["rows"] != task.size:
            raise IncompleteShardsError(
                f"shard {task.shard} holds {report['rows']} vectors, expected {task.size}"
            )
        reports.append(report)
    return reports


def finish_sharded_build(
    build: ShardedBuild, trained: TrainedIndex
) -> tuple[BuiltIndex, list[FileDigest]]:
    """Merge (or gather) the shards, combine the exact answers, tune; remove the scratch files.

    Returns:
        ``(built, index_files)``: the tuned index and the files that hold it, in shard order.

    Raises:
        IncompleteShardsError: a shard is missing or has the wrong number of rows.
    """
    start = time.perf_counter()
    settings = build.settings
    reports = _shard_reports(build)
    parts = []
    for task in build.tasks:
        with np.load(io.BytesIO(_read_bytes(build.exact_path(task.shard)))) as exact:
            parts.append((exact["distances"], exact["positions"]))
    _, truth = ExactTopK.merge(parts, RECALL_K, settings.metric)

    shards = [
        read_index_file(join(build.output, r["name"]), r["size"], r["sha256"]) for r in reports
    ]
    merge = mergeable(trained.index)
    if merge:
        # The first shard is the base: read from the same kind of file as the others, it has
        # the concrete class FAISS requires for merging (IndexFlatIP, not IndexFlat + metric).
        index = shards[0]
        for shard in shards[1:]:
            # IVF ids are stored and must be shifted to index positions; flat codes are
            # numbered by position implicitly, and FAISS refuses a shift for them.
            shift = index.ntotal if faiss.try_extract_index_ivf(index) is not None else 0
            index.merge_from(shard, shift)
    else:
        index = faiss.IndexShards(trained.index.d, True, True)  # threaded, successive ids
        for shard in shards:
            index.add_shard(shard)
    expected = build.n_rows - len(trained.held_out)
    if index.ntotal != expected:
        raise IncompleteShardsError(f"the shards hold {index.ntotal} vectors of {expected}")
    add_device = "gpu" if any(r["device"] == "gpu" for r in reports) else "cpu"
    built = finish_build(
        index,
        trained,
        truth,
        settings,
        add_device=add_device,
        seconds={"train": trained.seconds, "merge": time.perf_counter() - start},
    )
    if merge:
        index.add(trained.queries)  # held-out rows go last, as in the single-process build
        size, sha256 = write_index_file(index, join(build.output, INDEX_FILE))
        files = [FileDigest(INDEX_FILE, size, sha256)]
        FileSystems.delete([join(build.output, SHARDS_DIR)])
    else:
        last = faiss.clone_index(trained.index)
        last.add(trained.queries)
        set_search_params(last, built.tuning.search_params)
        index.add_shard(last)
        size, sha256 = write_index_file(last, join(build.output, HELD_OUT_SHARD))
        files = [FileDigest(r["name"], r["size"], r["sha256"]) for r in reports]
        files.append(FileDigest(HELD_OUT_SHARD, size, sha256))
    FileSystems.delete([build.work_dir])
    return built, files
