"""The clustered mode's Beam transforms (the exact mode's are in
:mod:`sbert_pipeline.pairs.exact_transforms`, the settings both share in
:mod:`sbert_pipeline.pairs.settings`).

:class:`ClusterBlockedPairs` (SemDeDup-style, see ``sbert_pipeline.vectors.block_plan``)::

    ListShards -> SpreadShards -> RouteToBlocks -> GroupBlockFiles -> SearchBlocks
        -> GroupByOutputShard -> MergeAndWrite

Each embeddings shard is read by one worker, which writes its vectors once, in row order, to
``_work/vectors/from-S.f32`` (:mod:`sbert_pipeline.pairs.row_store`), assigns every vector to the
blocks of its ``nprobe`` nearest centroids and writes, by *block group* (blocks packed into
groups of bounded size), which rows join which block to ``_work/blocks/group-G/from-S.parquet``
(block, output shard, id, source shard and row: no vectors). One worker per group reads the
group's row lists, gathers those rows' vectors from the vector files, searches each of its
blocks exactly, and writes every item's candidate list (and the pairs, by ``id_a``) to
``_work/{neighbors,pairs}/shard-O/group-G.parquet`` for the output shard its id hashes to, then
a marker ``_work/searched/group-G.json`` the launcher counts for its progress line. One worker
per output shard merges its candidates and writes the final shard, with a small JSON report of
rows and blocks for the launcher. Temporary disk holds each vector once (plus ``nprobe`` short
rows per vector and the candidate lists), Beam carries only ``(key, file)`` elements, and a
worker holds at most one group of blocks, whatever N; the launcher removes ``_work/`` at the
end.

The exact and clustered pipelines are single chains with one leaf and no tagged outputs, and
every file is written under a temporary name and renamed to a deterministic one, so a retried
element replaces its own files; they run the same on the FnApiRunner, Dataflow, Spark, Flink
and Dask.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.metrics import Metrics
from sbert_pipeline.io.atomic import StagedFiles
from sbert_pipeline.io.centroids import load_centroids
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import join, write_json
from sbert_pipeline.io.pairs_output import NEIGHBORS, PAIRS
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from sbert_pipeline.io.shards import stable_bucket
from sbert_pipeline.pairs.merge import merge_neighbors, merge_pairs
from sbert_pipeline.pairs.output_tables import neighbors_table, pairs_table, part_path
from sbert_pipeline.pairs.row_store import read_rows_at, write_rows
from sbert_pipeline.pairs.settings import (
    METRICS_NAMESPACE,
    SEARCHED_DIR,
    WORK_DIR,
    PairsSettings,
    write_parquet,
)
from sbert_pipeline.vectors.block_plan import nearest_centroids
from sbert_pipeline.vectors.block_search import search_block

logger = logging.getLogger(__name__)


def report_path(output: str, shard: int) -> str:
    """The report an output shard's writer leaves for the launcher."""
    return join(output, WORK_DIR, f"shard-{shard:05d}.json")


def read_reports(output: str) -> list[dict]:
    """Every writer report of a clustered run, in shard order."""
    pattern = join(output, WORK_DIR, "shard-*.json")
    reports = []
    for path in sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list):
        with FileSystems.open(path) as handle:
            reports.append(json.loads(handle.read().decode("utf-8")))
    return reports


ROUTED_SCHEMA = pa.schema(
    [
        pa.field("block", pa.int32(), nullable=False),
        pa.field("shard", pa.int32(), nullable=False),
        pa.field("id", pa.string(), nullable=False),
        pa.field("source", pa.int32(), nullable=False),
        pa.field("row", pa.int64(), nullable=False),
    ]
)
"""Rows sent to a block: block number, output shard of the id, id, and where its vector is
(embeddings shard ``source``, row ``row`` of its vector file)."""


def routed_path(output: str, group: int, shard: int) -> str:
    """Where embeddings shard ``shard`` leaves its row lists for block group ``group``."""
    return join(output, WORK_DIR, "blocks", f"group-{group:05d}", f"from-{shard:05d}.parquet")


def vectors_path(output: str, shard: int) -> str:
    """Where embeddings shard ``shard`` leaves its vectors, once, in row order."""
    return join(output, WORK_DIR, "vectors", f"from-{shard:05d}.f32")


def searched_path(output: str, group: int) -> str:
    """The marker a searched block group leaves for the launcher's progress line."""
    return join(output, WORK_DIR, SEARCHED_DIR, f"group-{group:05d}.json")


def candidates_path(output: str, folder: str, shard: int, group: int) -> str:
    """Where block group ``group`` leaves its results for output shard ``shard``."""
    return join(output, WORK_DIR, folder, f"shard-{shard:05d}", f"group-{group:05d}.parquet")


@dataclass(frozen=True)
class GroupResult:
    """What a searched block group tells the writer of one output shard.

    ``blocks`` (``(block, size)`` pairs) is filled in exactly one of a group's elements, so
    that every block is reported once.
    """

    group: int
    has_candidates: bool
    blocks: tuple[tuple[int, int], ...] = ()


class _RouteFn(beam.DoFn):
    """``(index, embeddings shard)`` -> its vectors written once, its rows listed by block
    group; ``(group, row-list file)``."""

    def __init__(
        self, settings: PairsSettings, centroids_path: str, nprobe: int, groups, n_shards: int
    ) -> None:
        self._settings = settings
        self._centroids_path = centroids_path
        self._nprobe = nprobe
        self._groups = np.asarray(groups, np.int64)
        self._n_shards = n_shards
        self._centroids: np.ndarray | None = None
        self._routed = Metrics.counter(METRICS_NAMESPACE, "rows_routed")

    def setup(self) -> None:
        self._centroids = load_centroids(self._centroids_path)

    def process(self, item: tuple[int, str]) -> Iterator[tuple[int, str]]:
        index, path = item
        writers = StagedFiles(ROUTED_SCHEMA)
        offset = 0

        def route(batches: Iterator[tuple[pa.Array, np.ndarray]]) -> Iterator[np.ndarray]:
            nonlocal offset
            for ids, vectors in batches:
                self._write_lists(index, offset, ids, vectors, writers)
                offset += len(vectors)
                self._routed.inc(len(vectors))
                yield vectors

        write_rows(
            vectors_path(self._settings.output, index),
            route(self._settings.reader.read_shard(path)),
        )
        for final in writers.close():
            yield int(final.rsplit("group-", 1)[1][:5]), final

    def _write_lists(
        self, index: int, offset: int, ids: pa.Array, vectors: np.ndarray, writers: StagedFiles
    ) -> None:
        """Which rows of one batch (rows ``offset...`` of shard ``index``) join which block."""
        probes = nearest_centroids(vectors, self._centroids, self._nprobe)  # (b, nprobe)
        blocks = probes.reshape(-1)
        rows = np.repeat(np.arange(len(vectors)), self._nprobe)
        groups = self._groups[blocks]
        order = np.lexsort((rows, blocks, groups))
        blocks, rows, groups = blocks[order], rows[order], groups[order]
        shards = np.fromiter(
            (stable_bucket(i, self._n_shards) for i in ids.to_pylist()), np.int32, len(ids)
        )
        cuts = np.flatnonzero(np.diff(groups)) + 1
        for members in np.split(np.arange(len(rows)), cuts):
            picked = rows[members]
            table = pa.Table.from_arrays(
                [
                    pa.array(blocks[members].astype(np.int32)),
                    pa.array(shards[picked]),
                    ids.take(pa.array(picked)),
                    pa.array(np.full(len(picked), index, np.int32)),
                    pa.array(picked + offset),
                ],
                schema=ROUTED_SCHEMA,
            )
            writers.write(routed_path(self._settings.output, int(groups[members[0]]), index), table)


@dataclass(frozen=True)
class _Block:
    """One block's rows, in id order: ids, vectors, and each id's output shard."""

    ids: pa.Array
    vectors: np.ndarray
    shards: np.ndarray


def group_vectors(output: str, dim: int, sources: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``(m, dim)`` the vectors of the rows ``(sources[i], rows[i])``, in that order, gathered
    from the vector files: one array of the group's rows, filled one source shard at a time."""
    vectors = np.empty((len(rows), dim), np.float32)
    for source in np.unique(sources).tolist():
        places = np.flatnonzero(sources == source)
        vectors[places] = read_rows_at(vectors_path(output, source), dim, rows[places])
    return vectors


class _SearchGroupFn(beam.DoFn):
    """``(group, row-list files)`` -> every block of the group searched exactly; its lists and
    pairs written per output shard, then the group's marker; ``(output shard, GroupResult)``."""

    def __init__(self, settings: PairsSettings, n_shards: int, max_block: int) -> None:
        self._settings = settings
        self._n_shards = n_shards
        self._max_block = max_block
        self._searched = Metrics.counter(METRICS_NAMESPACE, "block_rows_searched")
        self._over_cap = Metrics.counter(METRICS_NAMESPACE, "blocks_over_cap")

    def process(self, item: tuple[int, Iterable[str]]) -> Iterator[tuple[int, GroupResult]]:
        group, paths = item
        s = self._settings
        tables = []
        for path in sorted(set(paths)):
            with FileSystems.open(path) as handle:
                tables.append(pq.read_table(handle, schema=ROUTED_SCHEMA))
        table = pa.concat_tables(tables).combine_chunks()
        del tables
        # Arrival order depends on the runner; (block, id) order makes every block, and the
        # ties within it, the same on every run.
        table = table.take(pc.sort_indices(table, [("block", "ascending"), ("id", "ascending")]))
        blocks = table["block"].to_numpy()
        shards = table["shard"].to_numpy()
        ids = table["id"].combine_chunks()
        vectors = group_vectors(
            s.output, s.reader.dim, table["source"].to_numpy(), table["row"].to_numpy()
        )
        del table
        neighbors = StagedFiles(NEIGHBORS_SCHEMA)
        pairs = StagedFiles(PAIRS_SCHEMA)
        sizes = []
        starts = np.flatnonzero(np.diff(blocks, prepend=-1))
        for lo, hi in pairwise([*starts.tolist(), len(blocks)]):
            sizes.append((int(blocks[lo]), hi - lo))
            block = _Block(ids.slice(lo, hi - lo), vectors[lo:hi], shards[lo:hi])
            self._search(group, block, neighbors, pairs)
        del vectors
        written = {int(path.rsplit("shard-", 1)[1][:5]) for path in neighbors.close()}
        pairs.close()
        write_json(searched_path(s.output, group), {"group": group, "blocks": len(sizes)})
        home = group % self._n_shards
        for shard in sorted(written | {home}):
            blocks_here = tuple(sizes) if shard == home else ()
            yield shard, GroupResult(group, shard in written, blocks_here)

    def _search(
        self, group: int, block: _Block, neighbors: StagedFiles, pairs: StagedFiles
    ) -> None:
        s = self._settings
        size = len(block.ids)
        if size > self._max_block:
            self._over_cap.inc()
            logger.warning(
                "a block holds %d vectors, more than the cap of %d (near-identical vectors "
                "cannot be split); searching it whole",
                size,
                self._max_block,
            )
        result = search_block(block.vectors, s.k, threshold=s.threshold, precision=s.precision)
        lists = neighbors_table(block.ids, np.arange(size), result.indices, result.scores)
        found = pairs_table(block.ids, result.pair_a, result.pair_b, result.pair_scores)
        pair_shards = block.shards[result.pair_a]
        for shard in np.unique(block.shards).tolist():
            neighbors.write(
                candidates_path(s.output, NEIGHBORS, shard, group),
                lists.filter(pa.array(block.shards == shard)),
            )
            if s.threshold is not None:
                pairs.write(
                    candidates_path(s.output, PAIRS, shard, group),
                    found.filter(pa.array(pair_shards == shard)),
                )
        self._searched.inc(size)


class _MergeWriteFn(beam.DoFn):
    """``(output shard, GroupResults)`` -> the merged ``neighbors/`` and ``pairs/`` shards and
    a report for the launcher."""

    def __init__(self, settings: PairsSettings, n_shards: int) -> None:
        self._settings = settings
        self._n_shards = n_shards

    def process(self, item: tuple[int, Iterable[GroupResult]]) -> Iterator[tuple[int, int]]:
        shard, results = item
        results = list(results)
        s = self._settings
        groups = sorted({r.group for r in results if r.has_candidates})
        lists = merge_neighbors(
            [
                _read(candidates_path(s.output, NEIGHBORS, shard, g), NEIGHBORS_SCHEMA)
                for g in groups
            ]
            or [NEIGHBORS_SCHEMA.empty_table()],
            s.k,
        )
        rows = write_parquet(
            part_path(s.output, NEIGHBORS, shard, self._n_shards), lists, NEIGHBORS_SCHEMA
        )
        pairs = 0
        if s.threshold is not None:
            found = merge_pairs(
                [_read(candidates_path(s.output, PAIRS, shard, g), PAIRS_SCHEMA) for g in groups]
                or [PAIRS_SCHEMA.empty_table()]
            )
            pairs = write_parquet(
                part_path(s.output, PAIRS, shard, self._n_shards), found, PAIRS_SCHEMA
            )
        lengths = pc.list_value_length(lists["neighbor_ids"]).to_numpy(zero_copy_only=False)
        report = {
            "shard": shard,
            "rows": rows,
            "pairs": pairs,
            "short_lists": int(np.sum(lengths < s.k)),
            "blocks": sorted(block for r in results for block in r.blocks),
        }
        write_json(report_path(s.output, shard), report)
        yield shard, rows


def _read(path: str, schema: pa.Schema) -> pa.Table:
    with FileSystems.open(path) as handle:
        return pq.read_table(handle, schema=schema)


class ClusterBlockedPairs(beam.PTransform):
    """Top-k (and pairs above the threshold) searched exactly within cluster blocks.

    Args:
        settings: output, vectors, k, threshold.
        centroids_path: ``centroids.npy`` (from
        :func:`sbert_pipeline.vectors.block_plan.plan_blocks`). nprobe: blocks each vector joins
        (its nearest centroids). groups: ``(blocks,)`` the group of each block
        (:func:`sbert_pipeline.vectors.block_plan.group_blocks`); a worker holds one group's vectors
        at a time.
        n_shards: output shards; an item's row is in shard ``crc32(id) % n_shards``.
        max_block: block size above which a block is counted and logged as over the cap.

    Emits ``(shard, neighbour rows)`` per output shard.
    """

    def __init__(
        self,
        settings: PairsSettings,
        centroids_path: str,
        *,
        nprobe: int,
        groups: np.ndarray,
        n_shards: int,
        max_block: int,
    ) -> None:
        super().__init__()
        self._shards = list(enumerate(settings.reader.shards))
        self._route = _RouteFn(settings, centroids_path, nprobe, groups, n_shards)
        self._search = _SearchGroupFn(settings, n_shards, max_block)
        self._write = _MergeWriteFn(settings, n_shards)

    def expand(self, pbegin):
        return (
            pbegin
            | "ListShards" >> beam.Create(self._shards)
            | "SpreadShards" >> beam.Reshuffle()
            | "RouteToBlocks" >> beam.ParDo(self._route)
            | "GroupBlockFiles" >> beam.GroupByKey()
            | "SearchBlocks" >> beam.ParDo(self._search)
            | "GroupByOutputShard" >> beam.GroupByKey()
            | "MergeAndWrite" >> beam.ParDo(self._write)
        )
