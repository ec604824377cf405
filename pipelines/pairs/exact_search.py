"""The exact mode's search and shard writing, Beam-free: what the exact transforms' workers run
(:mod:`sbert_pipeline.pairs.exact_transforms`) and what the launcher runs itself on a local runner.

The output has one ``neighbors/`` (and ``pairs/``) shard per contiguous range of query rows in
id order (:func:`plan_ranges`), whether the ranges were searched one by one or all at once
(:func:`search_all`), so the files do not depend on the path that wrote them.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import numpy as np
import pyarrow as pa
from sbert_pipeline.io.pairs_output import NEIGHBORS, PAIRS
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from sbert_pipeline.pairs.output_tables import neighbors_table, pairs_table, part_path
from sbert_pipeline.pairs.settings import PairsSettings, write_parquet
from sbert_pipeline.vectors.block_search import BlockResult, search_block

# Output shards the whole-matrix search writes at a time.
_WRITERS = 2


def plan_ranges(n: int, count: int) -> list[tuple[int, int]]:
    """``count`` contiguous query ranges of near-equal size covering ``[0, n)`` (fewer if n is)."""
    count = max(1, min(count, n))
    bounds = np.linspace(0, n, count + 1).round().astype(np.int64)
    return [(int(lo), int(hi)) for lo, hi in pairwise(bounds)]


def write_range(
    settings: PairsSettings,
    ids: pa.Array,
    index: int,
    count: int,
    rows: tuple[int, int],
    result: BlockResult,
) -> tuple[int, int, int]:
    """Write the ``neighbors/`` (and ``pairs/``) shard ``index`` of ``count`` for the query rows
    ``rows``: ``result`` holds their lists (``rows`` long) and exactly their pairs (those whose
    smaller position lies in ``rows``). Returns ``(index, neighbour rows, pairs)``."""
    start, stop = rows
    table = neighbors_table(ids, np.arange(start, stop), result.indices, result.scores)
    write_parquet(part_path(settings.output, NEIGHBORS, index, count), table, NEIGHBORS_SCHEMA)
    pairs = 0
    if settings.threshold is not None:
        found = pairs_table(ids, result.pair_a, result.pair_b, result.pair_scores)
        pairs = write_parquet(part_path(settings.output, PAIRS, index, count), found, PAIRS_SCHEMA)
    return index, table.num_rows, pairs


def _range_of(result: BlockResult, rows: tuple[int, int]) -> BlockResult:
    """The part of a search of every row (started at row 0) that a range search of the query
    rows ``rows`` gives: their lists and the pairs whose smaller position is among them (the
    pairs are sorted by ``(a, b)``, so they are one slice)."""
    start, stop = rows
    lo, hi = np.searchsorted(result.pair_a, [start, stop])
    return BlockResult(
        result.indices[start:stop],
        result.scores[start:stop],
        result.pair_a[lo:hi],
        result.pair_b[lo:hi],
        result.pair_scores[lo:hi],
    )


def search_all(
    settings: PairsSettings, ids: pa.Array, vectors: np.ndarray, ranges: list[tuple[int, int]]
) -> Iterator[tuple[int, int, int]]:
    """Search every vector at once (``ids`` ascending, as :meth:`VectorReader.load_sorted`
    gives them) and write each range's shards, as :class:`WholeExactPairs` does (the launcher
    calls it itself on a local runner); ``(shard, neighbour rows, pairs)`` per range."""
    s = settings
    result = search_block(vectors, s.k, threshold=s.threshold, precision=s.precision)
    yield from write_ranges(s, ids, result, ranges)


def write_ranges(
    settings: PairsSettings, ids: pa.Array, result: BlockResult, ranges: list[tuple[int, int]]
) -> Iterator[tuple[int, int, int]]:
    """Write every range's shards from ``result``, every row's lists and every pair (by
    position into ``ids``, ascending); ``(shard, neighbour rows, pairs)`` per range."""

    def write(index: int, rows: tuple[int, int]) -> tuple[int, int, int]:
        return write_range(settings, ids, index, len(ranges), rows, _range_of(result, rows))

    # Shards are separate files, built and written by Arrow without Python's lock: a few at once.
    with ThreadPoolExecutor(_WRITERS, thread_name_prefix="pairs-write") as pool:
        yield from pool.map(write, range(len(ranges)), ranges)
