"""The exact answer for a few sample queries, and the recall of an approximate one (Beam-free).

Approximate searches (``sbert index``'s FAISS indexes, ``sbert pairs``' cluster blocks) are
measured against the exact top-k of a sample of queries. :class:`ExactTopK` computes that
answer over vectors that arrive batch by batch (memory: the queries and their running ``k``
best), and :func:`recall_at_k` compares a found answer with it.

Example:
    >>> truth = ExactTopK(queries, 10, exclude_rows=query_rows, keep_vectors=True)
    >>> for ids, vectors in batches:  # in row order
    ...     truth.add(vectors, ids)
    >>> true_ids, (true_scores, _) = truth.neighbor_ids(), truth.result()
    >>> recall_at_k(found_ids, true_ids, 10, found_scores=found, true_scores=true_scores)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np
import pyarrow as pa
from sbert_pipeline.vectors.topk import topk_neighbors

Metric = Literal["ip", "l2"]
Kernel = Literal["torch", "faiss"]


class ExactTopK:
    """Exact top-``k`` of fixed queries over vectors that arrive batch by batch.

    Positions count from ``offset`` in arrival order, so that the shards of a corpus can each
    keep one and :meth:`merge` combines their results into the answer over the whole corpus.

    Two kernels search a batch and fold it into the running best. They are kept apart because
    they break ties (equal scores at the k-th place) differently, and the recalls the stages
    have measured and recorded must not move by a tie:

    - ``torch`` (``sbert pairs``): :func:`sbert_pipeline.vectors.topk.topk_neighbors` in fp32 on
      inner products, ties by the smaller position. It can leave out each query's own row
      (``exclude_rows``, by position, so an exact duplicate elsewhere still counts), keep the
      neighbours' ids and vectors.
    - ``faiss`` (``sbert index``, the ``IndexFlat`` answer): ``faiss.knn`` and a
      ``faiss.ResultHeap``, inner product (``ip``) or squared L2 distance (``l2``); ties as
      FAISS orders them.

    Args:
        queries: ``(q, d)`` float32 query vectors (prepared for the metric).
        k: neighbours per query.
        metric: ``ip`` (larger is nearer) or ``l2`` (smaller is nearer; ``faiss`` only).
        offset: position of the first vector added.
        exclude_rows: ``(q,)`` position of each query among the vectors (``torch`` only).
        keep_vectors: keep the neighbours' vectors for :meth:`neighbor_vectors` (``torch``).
        kernel: ``torch`` or ``faiss``, see above.

    Raises:
        ValueError: an unknown metric or kernel, or an option the kernel does not have.
    """

    def __init__(
        self,
        queries: np.ndarray,
        k: int,
        *,
        metric: Metric = "ip",
        offset: int = 0,
        exclude_rows: np.ndarray | None = None,
        keep_vectors: bool = False,
        kernel: Kernel = "torch",
    ) -> None:
        if metric not in ("ip", "l2"):
            raise ValueError(f"metric must be 'ip' or 'l2', got {metric!r}")
        if kernel not in ("torch", "faiss"):
            raise ValueError(f"kernel must be 'torch' or 'faiss', got {kernel!r}")
        if kernel == "faiss" and (exclude_rows is not None or keep_vectors):
            raise ValueError("the faiss kernel keeps positions only (no exclude_rows, vectors)")
        if kernel == "torch" and metric != "ip":
            raise ValueError("the torch kernel ranks by inner product: use metric='ip'")
        self._k = k
        self._metric = metric
        self._kernel = kernel
        self._offset = offset
        self._added = 0
        if kernel == "faiss":
            import faiss  # only the index stage needs FAISS

            self._queries = queries
            self._heap = faiss.ResultHeap(len(queries), k, keep_max=metric == "ip")
            return
        self._queries = np.ascontiguousarray(queries, dtype=np.float32)
        q, dim = self._queries.shape
        self._exclude = None if exclude_rows is None else np.asarray(exclude_rows, np.int64)
        self._best_rows = np.full((q, k), -1, np.int64)
        self._best_scores = np.full((q, k), -np.inf, np.float32)
        self._best_vectors = np.zeros((q, k, dim), np.float32) if keep_vectors else None
        self._ids: dict[int, str] = {}

    def add(self, vectors: np.ndarray, ids: Sequence[str] | pa.Array | None = None) -> None:
        """Search the next batch (positions continue from the previous batch).

        Args:
            vectors: ``(m, d)`` float32, prepared for the metric.
            ids: the batch's ids, kept for :meth:`neighbor_ids` (``torch`` kernel).
        """
        if self._kernel == "faiss":
            self._add_faiss(vectors)
        elif len(vectors) and len(self._queries):
            self._add_torch(vectors, ids)
        self._added += len(vectors)

    def _add_faiss(self, vectors: np.ndarray) -> None:
        import faiss

        k = min(self._k, len(vectors))
        if k:
            metric = faiss.METRIC_INNER_PRODUCT if self._metric == "ip" else faiss.METRIC_L2
            distances, positions = faiss.knn(self._queries, vectors, k, metric=metric)
            self._heap.add_result(distances, positions + self._offset + self._added)

    def _add_torch(self, vectors: np.ndarray, ids: Sequence[str] | pa.Array | None) -> None:
        first = self._offset + self._added
        # One spare when the query itself may be in the batch.
        take = min(self._k + (self._exclude is not None), len(vectors))
        found, scores = topk_neighbors(self._queries, vectors, take, exclude_self=False)
        if self._best_vectors is not None:
            candidates = np.concatenate([self._best_vectors, vectors[found]], axis=1)
        found = found + first
        if self._exclude is not None:
            scores[found == self._exclude[:, None]] = -np.inf
        rows = np.concatenate([self._best_rows, found], axis=1)
        scores = np.concatenate([self._best_scores, scores], axis=1)
        order = np.lexsort((rows, -scores), axis=1)[:, : self._k]
        self._best_rows = np.take_along_axis(rows, order, axis=1)
        self._best_scores = np.take_along_axis(scores, order, axis=1)
        if self._best_vectors is not None:
            self._best_vectors = np.take_along_axis(candidates, order[:, :, None], axis=1)
        if ids is None:
            return
        fresh = np.unique(self._best_rows[self._best_rows >= first])
        local = (fresh - first).tolist()
        names = ids.take(pa.array(local)).to_pylist() if isinstance(ids, pa.Array) else None
        for position, row in enumerate(fresh.tolist()):
            self._ids[row] = names[position] if names is not None else ids[local[position]]

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, positions)``, each ``(q, k)``, nearest first; -1 where fewer than ``k``.

        Scores are inner products for ``ip`` and squared distances for ``l2``.
        """
        if self._kernel == "faiss":
            self._heap.finalize()
            return self._heap.D, self._heap.I
        return self._best_scores, self._best_rows

    def neighbor_ids(self) -> list[list[str]]:
        """Per query, the ids of its exact ``k`` nearest vectors (``add`` was given ids)."""
        self._check()
        try:
            return [[self._ids[int(r)] for r in row] for row in self._best_rows]
        except KeyError:
            raise ValueError(
                "neighbor_ids needs the ids of every batch (add(vectors, ids))"
            ) from None

    def neighbor_vectors(self) -> np.ndarray:
        """``(q, k, d)``: the vectors of each query's exact ``k`` nearest rows."""
        self._check()
        if self._best_vectors is None:
            raise ValueError("neighbor_vectors needs ExactTopK(..., keep_vectors=True)")
        return self._best_vectors

    def _check(self) -> None:
        if self._kernel == "faiss":
            raise ValueError("the faiss kernel keeps positions only: use result()")
        if self._added <= self._k:
            raise ValueError(f"need more than k = {self._k} rows, got {self._added}")

    @staticmethod
    def merge(
        parts: Iterable[tuple[np.ndarray, np.ndarray]], k: int, metric: Metric
    ) -> tuple[np.ndarray, np.ndarray]:
        """Combine per-shard ``result()``s (positions already global) into the corpus-wide top-k.

        Uses the ``faiss`` kernel's heap, so that a sharded build gets the answer of one
        :class:`ExactTopK` (``kernel="faiss"``) fed the whole corpus.

        Raises:
            ValueError: no parts.
        """
        import faiss

        heap = None
        for distances, positions in parts:
            if heap is None:
                heap = faiss.ResultHeap(len(distances), k, keep_max=metric == "ip")
            keep = positions >= 0
            # Padding slots of a shard smaller than k must never win against real rows.
            worst = -np.inf if metric == "ip" else np.inf
            heap.add_result(
                np.where(keep, distances, worst).astype(np.float32),
                np.where(keep, positions, -1).astype(np.int64),
            )
        if heap is None:
            raise ValueError("no exact-search results to merge")
        heap.finalize()
        return heap.D, heap.I


def recall_at_k(
    found: Sequence[Sequence],
    truth: Sequence[Sequence],
    k: int,
    *,
    found_scores: Sequence[Sequence[float]] | None = None,
    true_scores: Sequence[Sequence[float]] | np.ndarray | None = None,
    tolerance: float = 1e-6,
) -> float:
    """Share of the exact top-``k`` that the found lists hold.

    Args:
        found, truth: per query, distinct items nearest first (ids, or positions where -1
            marks an empty slot, e.g. an index with fewer than ``k`` vectors: it counts neither
            as a hit nor as an item to find). Only the first ``k`` of each list count.
        k: list length compared.
        found_scores, true_scores: give both to count ties as hits: a found item whose score is
            within ``tolerance`` of the query's exact ``k``-th score is another of several tied
            rows. Without them, hits are the overlap of the lists.

    Returns:
        Hits (at most the items to find, per query) over the items to find; 1.0 when there is
        nothing to find.
    """
    ties = found_scores is not None and true_scores is not None
    hits = total = 0
    for query, (found_row, true_row) in enumerate(zip(found, truth, strict=True)):
        wanted = {item for item in list(true_row)[:k] if not _empty(item)}
        floor = float(list(true_scores[query])[:k][-1]) - tolerance if ties and wanted else None
        listed = list(found_row)[:k]
        scores = list(found_scores[query])[:k] if ties else [None] * len(listed)
        matched = {
            item
            for item, score in zip(listed, scores, strict=True)
            if not _empty(item) and (item in wanted or (floor is not None and score >= floor))
        }
        hits += min(len(matched), len(wanted))
        total += len(wanted)
    # One division of whole numbers: the same value for both callers' former formulas (a mean
    # of per-query fractions, a ratio of counts) up to their float rounding.
    return hits / total if total else 1.0


def _empty(item) -> bool:
    return isinstance(item, int | np.integer) and item < 0
