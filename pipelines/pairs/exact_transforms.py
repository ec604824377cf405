"""The exact mode's Beam transforms: by query ranges, or the whole matrix in one step.

:class:`ExactPairs` (every vector against every vector)::

    ListRanges -> SpreadRanges -> SearchRanges

One element per range of query rows. Each worker loads every vector once (``DoFn.setup``, in
id order: ``n * d * 4`` bytes, twice that while sorting) and writes, per range, the
``neighbors/`` and ``pairs/`` shards of those rows. Ranges are contiguous in id order, so the
shards are too.

:class:`WholeExactPairs` (the same outputs, when one worker can hold every row's lists)::

    ListAllRanges -> SearchAll

One element: one worker searches every row at once, over the upper triangle of the score
matrix (half the products of the ranges, which each multiply their rows by all ``n``), and
writes every range's shards from that one answer.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics
from sbert_pipeline.pairs.exact_search import plan_ranges as plan_ranges  # the ranges these take
from sbert_pipeline.pairs.exact_search import search_all, write_range
from sbert_pipeline.pairs.settings import METRICS_NAMESPACE, PairsSettings
from sbert_pipeline.vectors.block_search import search_block
from sbert_pipeline.vectors.progress import shared_progress


class _SearchRangeFn(beam.DoFn):
    """``(index, (start, stop))`` -> ``neighbors/`` (and ``pairs/``) shard ``index``."""

    def __init__(self, settings: PairsSettings, count: int) -> None:
        self._settings = settings
        self._count = count
        self._ids: pa.Array | None = None
        self._vectors: np.ndarray | None = None
        self._searched = Metrics.counter(METRICS_NAMESPACE, "rows_searched")

    def setup(self) -> None:
        self._ids, self._vectors = self._settings.reader.load_sorted()
        self._progress().start()  # the rate counts from the first range

    def _progress(self):
        """The bar of the ranges done, one per process (shared by every bundle's instance)."""
        return shared_progress("pairs (query ranges)", "ranges", total=self._count)

    def process(self, item: tuple[int, tuple[int, int]]) -> Iterator[tuple[int, int, int]]:
        index, (start, stop) = item
        s = self._settings
        result = search_block(
            self._vectors, s.k, threshold=s.threshold, rows=(start, stop), precision=s.precision
        )
        self._searched.inc(stop - start)
        self._progress().update()
        yield write_range(s, self._ids, index, self._count, (start, stop), result)


class ExactPairs(beam.PTransform):
    """Exact top-k (and pairs above the threshold) of every vector, by ranges of query rows.

    Args:
        settings: output, vectors, k, threshold.
        ranges: ``(start, stop)`` query rows in id order, one output shard each
            (:func:`plan_ranges`).

    Emits ``(shard, neighbour rows, pairs)`` per range.
    """

    def __init__(self, settings: PairsSettings, ranges: list[tuple[int, int]]) -> None:
        super().__init__()
        self._ranges = list(ranges)
        self._fn = _SearchRangeFn(settings, len(self._ranges))

    def expand(self, pbegin):
        return (
            pbegin
            | "ListRanges" >> beam.Create(list(enumerate(self._ranges)))
            # Spread ranges over workers; Create alone would keep them on one.
            | "SpreadRanges" >> beam.Reshuffle()
            | "SearchRanges" >> beam.ParDo(self._fn)
        )


class _SearchAllFn(beam.DoFn):
    """``ranges`` -> every vector searched at once; the ``neighbors/`` (and ``pairs/``) shard of
    each range written from the one answer."""

    def __init__(self, settings: PairsSettings) -> None:
        self._settings = settings
        self._searched = Metrics.counter(METRICS_NAMESPACE, "rows_searched")

    def process(self, ranges: list[tuple[int, int]]) -> Iterator[tuple[int, int, int]]:
        ids, vectors = self._settings.reader.load_sorted()
        yield from search_all(self._settings, ids, vectors, ranges)
        self._searched.inc(len(ids))


class WholeExactPairs(beam.PTransform):
    """:class:`ExactPairs`'s outputs from one search of every vector by one worker.

    The search covers the upper triangle of the score matrix once (each product serves both
    its rows and its columns, :func:`sbert_pipeline.vectors.allpairs.self_topk`), where query ranges
    on separate workers each multiply their rows by all ``n``: half the products, for a worker
    that holds every row's candidate list (:func:`sbert_pipeline.pairs.plan.whole_matrix_bytes`).
    The lists and pairs are exact either way, so the shards are the same files.

    Args:
        settings: output, vectors, k, threshold.
        ranges: ``(start, stop)`` query rows in id order, one output shard each.

    Emits ``(shard, neighbour rows, pairs)`` per range.
    """

    def __init__(self, settings: PairsSettings, ranges: list[tuple[int, int]]) -> None:
        super().__init__()
        self._ranges = list(ranges)
        self._fn = _SearchAllFn(settings)

    def expand(self, pbegin):
        return (
            pbegin
            | "ListAllRanges" >> beam.Create([self._ranges])
            | "SearchAll" >> beam.ParDo(self._fn)
        )
