"""Cluster-blocked all-pairs search (SemDeDup-style) and the exact block search (Beam-free).

A *block* is a set of vectors searched exactly against itself: :func:`search_block` gives every
member its top-``k`` other members and every pair of members at or above a threshold. The exact
mode of ``sbert pairs`` is one block holding all vectors, its query rows split into ranges
between workers; the clustered mode cuts the vectors into many overlapping blocks:

1. :func:`plan_blocks` fits spherical k-means (``pipelines.vectors.kmeans``) on a sample, chooses
   how many centroids each vector probes (:func:`choose_nprobe`) and splits any cluster whose
   block would be larger than a cap (:func:`split_oversized`), so that one block fits a worker.
2. :func:`nearest_centroids` assigns every vector to its ``nprobe`` nearest centroids; block
   ``c`` is every vector that has ``c`` among them. Near neighbours usually share a nearest
   centroid; probing more than one catches the pairs that straddle a cluster border.
   :func:`group_blocks` packs blocks into groups of bounded size, one worker's share at a time.
3. Each block is searched exactly; :func:`merge_neighbors` then combines the candidate lists an
   item got from its blocks (best score per neighbour, then score descending, ties by id) and
   :func:`merge_pairs` drops the pairs found in more than one block.

What the blocking misses is predicted and measured, not guessed. An item's merged list is its
exact top-k over the union of its blocks, so it holds a true neighbour exactly when the two
share a probed centroid: :func:`shared_probe_recall` gives the recall of any ``nprobe`` from
the probes of a few queries and their exact neighbours, which is how ``nprobe`` is chosen.
:class:`SampleTruth` computes those exact neighbours for a random sample of queries (streamed,
bounded memory), and :func:`recall_at_k` compares the written lists with them.

Scores are inner products of the rows as given, so pass L2-normalised rows for cosine.
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from pipelines.vectors.allpairs import candidate_error_bound, pair_scores, self_topk
from pipelines.vectors.kmeans import KMeansFit, assign, fit_spherical_kmeans
from pipelines.vectors.precision import Precision
from pipelines.vectors.topk import neighbors_above, topk_neighbors

logger = logging.getLogger(__name__)

# Rows of a threshold search at a time (rows whose top-k list is all above the threshold): the
# hits of one chunk are held in memory, and 256 rows keep the matrix product efficient.
_ABOVE_CHUNK = 256
# precision="auto" searches blocks smaller than this in fp32: the bf16 candidate pass only pays
# off on larger ones (measured per row on 384-d blocks: 1.2k rows fp32 128 us vs bf16 153 us,
# 2k 134 vs 157, 4k 153 vs 127, 10k 198 vs 151).
_BF16_MIN_ROWS = 4096
# Vectors compared with the centroids at a time when assigning: a (8192, C) score tile.
_ASSIGN_BLOCK = 8192


@dataclass(frozen=True)
class BlockResult:
    """Neighbour lists and pairs of a block's query rows, as positions within the block.

    Attributes:
        indices: ``(m, k')`` neighbour positions of the query rows, ``k' = min(k, n - 1)``,
            most similar first, equal scores by position.
        scores: ``(m, k')`` float32.
        pair_a, pair_b, pair_scores: every pair ``a < b`` with ``a`` a query row and score at
            or above the threshold (empty without one), sorted by ``(a, b)``.
    """

    indices: np.ndarray
    scores: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_scores: np.ndarray


def search_block(
    vectors: np.ndarray,
    k: int,
    *,
    threshold: float | None = None,
    rows: tuple[int, int] | None = None,
    precision: Precision = "auto",
    block_size: int | None = None,
) -> BlockResult:
    """Exact top-``k`` and exact pairs above ``threshold`` of the query rows within one block.

    Pairs come from the top-k lists where that is complete: a row whose k-th score is below the
    threshold has every neighbour above it in its list. Rows whose whole list is at or above
    the threshold (they may have more such neighbours) get an exact threshold search against
    the block, so the pairs are every pair above the threshold, however many, at the cost of
    one extra search for those rows only.

    Args:
        vectors: ``(n, d)`` float32 rows of the block (finite).
        k: neighbours wanted; a block with fewer than ``k + 1`` rows gives ``n - 1``.
        threshold: in ``[-1, 1]``; ``None`` finds no pairs.
        rows: the query rows ``[start, stop)`` (default all); pairs are those whose smaller
            position ``a`` is a query row, so calls over disjoint ranges find disjoint pairs.
        precision: candidate pass of :func:`pipelines.vectors.allpairs.self_topk` (the answer is the
            fp32 one either way); ``auto`` is fp32 for blocks of fewer than 4,096 rows.
        block_size: query rows per similarity tile (default: the search's own).

    Raises:
        ValueError: ``k < 1``, a threshold outside ``[-1, 1]``, bad rows or non-finite values.
    """
    n = len(vectors)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if threshold is not None and not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must lie in [-1, 1], got {threshold}")
    start, stop = rows if rows is not None else (0, n)
    if not 0 <= start <= stop <= n:
        raise ValueError(f"rows must satisfy 0 <= start <= stop <= {n}, got {rows}")
    k_block = min(k, n - 1)
    if k_block < 1 or start == stop:
        indices = np.zeros((stop - start, max(k_block, 0)), np.int64)
        scores = np.zeros(indices.shape, np.float32)
    else:
        if precision == "auto" and n < _BF16_MIN_ROWS:
            precision = "float32"
        indices, scores = self_topk(
            vectors, k_block, rows=(start, stop), block_size=block_size, precision=precision
        )
    if threshold is None or k_block < 1:
        empty = np.zeros(0, np.int64)
        return BlockResult(indices, scores, empty, empty.copy(), np.zeros(0, np.float32))
    a, b, s = _pairs_above(vectors, indices, scores, threshold, start)
    return BlockResult(indices, scores, a, b, s)


def _pairs_above(
    vectors: np.ndarray, indices: np.ndarray, scores: np.ndarray, threshold: float, start: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair ``a < b`` above the threshold with ``a`` among the rows of the lists.

    Scores are the top-k search's (float32 products summed in float64, rounded to float32), so
    that a pair's score, and whether it clears the threshold, does not depend on how it was
    found: the threshold search runs in fp32 with a margin and rescores what it finds the same
    way.
    """
    n, dim = vectors.shape
    m, k = indices.shape
    limit = np.float32(threshold)
    rows = np.arange(start, start + m, dtype=np.int64)
    # A list holding all other rows is complete whatever its scores.
    saturated = scores[:, -1] >= limit if k < n - 1 else np.zeros(m, bool)
    listed = (scores >= limit) & (indices > rows[:, None]) & ~saturated[:, None]
    found_a = [np.broadcast_to(rows[:, None], indices.shape)[listed]]
    found_b = [indices[listed]]
    found_s = [scores[listed]]
    full = rows[saturated]
    if len(full):
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
        margin = candidate_error_bound(dim, bf16=False) * float(norms.max()) ** 2
    for first in range(0, len(full), _ABOVE_CHUNK):
        part = full[first : first + _ABOVE_CHUNK]
        low = int(part[0])  # rows ascend: only columns from here on can be a larger partner
        hits = neighbors_above(
            vectors[part],
            vectors[low:],
            threshold - margin,
            exclude_self=True,
            query_positions=part - low,
        )
        for row, (columns, _) in zip(part, hits, strict=True):
            columns = columns[columns + low > row] + low
            final = _rescore(vectors, row, columns)
            above = final >= limit
            found_a.append(np.full(int(above.sum()), row, np.int64))
            found_b.append(columns[above])
            found_s.append(final[above])
    a, b, s = np.concatenate(found_a), np.concatenate(found_b), np.concatenate(found_s)
    order = np.lexsort((b, a))
    return a[order], b[order].astype(np.int64), s[order].astype(np.float32)


def _rescore(vectors: np.ndarray, row: int, columns: np.ndarray) -> np.ndarray:
    """Scores of ``row`` with ``columns`` exactly as :func:`pipelines.vectors.allpairs.self_topk`
    gives them (:func:`pipelines.vectors.allpairs.pair_scores`)."""
    with torch.inference_mode():
        columns_t = torch.from_numpy(np.ascontiguousarray(columns, dtype=np.int64))
        rows_t = torch.full_like(columns_t, row)
        return pair_scores(torch.from_numpy(vectors), rows_t, columns_t).numpy()


def nearest_centroids(vectors: np.ndarray, centroids: np.ndarray, nprobe: int) -> np.ndarray:
    """``(n, nprobe)`` int64: each row's ``nprobe`` most similar centroids, most similar first."""
    if not 1 <= nprobe <= len(centroids):
        raise ValueError(f"nprobe must be between 1 and {len(centroids)} centroids, got {nprobe}")
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    centres = torch.from_numpy(np.ascontiguousarray(centroids, dtype=np.float32))
    out = np.empty((len(vectors), nprobe), np.int64)
    with torch.inference_mode():
        for start in range(0, len(vectors), _ASSIGN_BLOCK):
            block = torch.from_numpy(vectors[start : start + _ASSIGN_BLOCK])
            out[start : start + len(block)] = (block @ centres.T).topk(nprobe, dim=1).indices
    return out


def default_clusters(n: int, k: int) -> int:
    """Clusters for ``n`` vectors: about ``2 sqrt(n)``, with at least ``4 k`` vectors per cluster.

    With ``C`` clusters and ``p`` probes the exact work is about ``p^2 n^2 / C`` products
    instead of ``n^2``. On 376k real MiniLM embeddings, recall@10 0.95 needed p = 5-6 at
    ``sqrt(n)`` clusters (6% of the exact work), p = 6 at ``2 sqrt(n)`` (3.9%) and p = 7 at
    ``4 sqrt(n)`` (2.7%): more, smaller clusters probed more often are cheaper, up to the cost
    of the k-means fit and the per-block overhead, which also grow with ``C``. ``2 sqrt(n)`` is
    2,000 clusters at 1M.
    """
    return max(1, min(round(2 * math.sqrt(n)), n // (4 * k)))


@dataclass(frozen=True)
class NprobeChoice:
    """How many centroids each vector probes, and the recall and work predicted for it.

    Attributes:
        nprobe: the choice.
        predicted_recall: recall@k that the tuning queries will get (None: not tuned).
        work: estimated exact work of all blocks, as a fraction of searching all pairs.
        reached: whether ``predicted_recall`` reached the target (None: not tuned).
        curve: ``(nprobe, predicted recall, work)`` of every value tried.
    """

    nprobe: int
    predicted_recall: float | None
    work: float
    reached: bool | None
    curve: tuple[tuple[int, float, float], ...] = ()

    def describe(self) -> dict:
        """What a manifest records about the choice."""
        return {
            "nprobe": self.nprobe,
            "predicted_recall": self.predicted_recall,
            "target_reached": self.reached,
            "estimated_work_fraction": self.work,
            "curve": [
                {"nprobe": p, "predicted_recall": r, "work_fraction": w} for p, r, w in self.curve
            ],
        }


@dataclass(frozen=True)
class Tuning:
    """Queries with their exact neighbours, for choosing ``nprobe`` (see :func:`choose_nprobe`).

    Attributes:
        queries: ``(q, d)`` query vectors.
        neighbors: ``(q, k, d)`` the vectors of each query's exact top-k.
        target: recall@k wanted.
    """

    queries: np.ndarray
    neighbors: np.ndarray
    target: float


def estimated_work(sample_probes: np.ndarray, n_blocks: int, n_total: int) -> float:
    """Exact work of the blocks (sum of squared sizes) as a fraction of ``n_total^2``.

    Block sizes are estimated from the probes of a uniform sample of the vectors.
    """
    counts = np.bincount(sample_probes.ravel(), minlength=n_blocks).astype(np.float64)
    sizes = counts * n_total / len(sample_probes)
    return float(np.sum(sizes**2) / float(n_total) ** 2)


def shared_probe_recall(
    query_probes: np.ndarray, neighbor_probes: np.ndarray, nprobe: int
) -> float:
    """recall@k that blocking with ``nprobe`` probes gives the queries, exactly (up to ties).

    An item's merged list is its top-k over the union of its blocks, so it holds a true
    neighbour exactly when the two share a probed centroid.

    Args:
        query_probes: ``(q, P)`` each query's centroids, nearest first (``P >= nprobe``).
        neighbor_probes: ``(q, k, P)`` the same for each query's exact top-k.
    """
    mine = query_probes[:, None, None, :nprobe]  # (q, 1, 1, p)
    theirs = neighbor_probes[:, :, :nprobe, None]  # (q, k, p, 1)
    return float((theirs == mine).any(axis=(2, 3)).mean())


def choose_nprobe(
    centroids: np.ndarray,
    sample: np.ndarray,
    n_total: int,
    tuning: Tuning,
    *,
    max_work: float = 0.25,
    max_nprobe: int = 32,
) -> NprobeChoice:
    """The smallest ``nprobe`` whose predicted recall reaches the target, within a work cap.

    Probing more centroids makes blocks larger (work grows about as ``nprobe^2``); past
    ``max_work`` of the exact work the clustered search stops paying for itself, so the search
    stops there (or at ``max_nprobe``) and reports that the target was not reached.

    Args:
        centroids: the block centroids.
        sample: ``(m, d)`` uniform sample of the vectors (for block sizes).
        n_total: number of vectors.
        tuning: queries, their exact neighbours, and the target recall.
    """
    top = min(max_nprobe, len(centroids))
    sample_probes = nearest_centroids(sample, centroids, top)
    query_probes, neighbor_probes = _tuning_probes(tuning, centroids, top)
    curve: list[tuple[int, float, float]] = []
    for nprobe in range(1, top + 1):
        work = estimated_work(sample_probes[:, :nprobe], len(centroids), n_total)
        if curve and work > max_work:
            break
        recall = shared_probe_recall(query_probes, neighbor_probes, nprobe)
        curve.append((nprobe, recall, work))
        if recall >= tuning.target:
            break
    nprobe, recall, work = curve[-1]
    return NprobeChoice(nprobe, recall, work, recall >= tuning.target, tuple(curve))


def _tuning_probes(tuning: Tuning, centroids: np.ndarray, top: int):
    """``(q, top)`` probes of the queries and ``(q, k, top)`` of their exact neighbours."""
    q, k, dim = tuning.neighbors.shape
    neighbors = nearest_centroids(tuning.neighbors.reshape(-1, dim), centroids, top)
    return nearest_centroids(tuning.queries, centroids, top), neighbors.reshape(q, k, top)


def split_oversized(
    sample: np.ndarray,
    centroids: np.ndarray,
    n_total: int,
    nprobe: int,
    max_block: int,
    *,
    seed: int = 0,
    iterations: int = 20,
    precision: Precision = "auto",
) -> tuple[np.ndarray, int]:
    """Split the clusters whose block would hold more than ``max_block`` vectors.

    A block's size is estimated from the sample: the sample rows that probe it, scaled by
    ``n_total / len(sample)``. An oversized cluster is replaced by the centroids of a k-means
    fit on its own sample members (as many as its estimate needs, at most its members); those
    that get no member are dropped. One level of splitting: a region of (near-)identical
    vectors cannot be split, and its block stays large (the job reports it).

    Returns:
        ``(centroids, number of clusters split)``.
    """
    probes = nearest_centroids(sample, centroids, min(nprobe, len(centroids)))
    estimate = np.bincount(probes.ravel(), minlength=len(centroids)) * n_total / len(sample)
    parts, split = [], 0
    for cluster in range(len(centroids)):
        members = np.flatnonzero(probes[:, 0] == cluster)
        pieces = min(math.ceil(estimate[cluster] / max_block), len(members))
        if pieces < 2:
            parts.append(centroids[cluster : cluster + 1])
            continue
        sub = fit_spherical_kmeans(
            sample[members], pieces, iterations=iterations, seed=seed, precision=precision
        )
        used = np.unique(assign(sample[members], sub.centroids, precision=precision).labels)
        parts.append(sub.centroids[used])
        split += 1
    if split:
        logger.info("split %d oversized clusters into %d blocks", split, sum(map(len, parts)))
    return np.concatenate(parts), split


@dataclass(frozen=True)
class BlockPlan:
    """The centroids that define the blocks, the probes per vector, and how they were found."""

    centroids: np.ndarray  # (C', d) float32 unit rows: the fitted ones, oversized ones split
    fit: KMeansFit  # the k-means fit on the sample, before splitting
    split: int  # fitted clusters whose estimated block exceeded the cap and were split
    choice: NprobeChoice
    estimated_sizes: np.ndarray  # (C',) block rows each centroid is expected to get

    @property
    def nprobe(self) -> int:
        """Centroids (blocks) each vector joins."""
        return self.choice.nprobe

    def describe(self) -> dict:
        """What a manifest records about the blocking."""
        sizes = self.estimated_sizes
        return {
            "fit": self.fit.describe(),
            "clusters_fitted": len(self.fit.centroids),
            "clusters_split": self.split,
            "blocks_planned": len(self.centroids),
            "estimated_largest_block": int(sizes.max()) if len(sizes) else 0,
            "nprobe_choice": self.choice.describe(),
        }


def plan_blocks(
    sample: np.ndarray,
    n_total: int,
    clusters: int,
    *,
    max_block: int,
    nprobe: int | None = None,
    tuning: Tuning | None = None,
    seed: int = 0,
    iterations: int = 20,
    precision: Precision = "auto",
) -> BlockPlan:
    """Fit the block centroids on a sample, choose ``nprobe``, split oversized clusters.

    Args:
        sample: ``(m, d)`` unit rows, a uniform sample of all ``n_total`` vectors.
        clusters: centroids fitted, ``1 <= clusters <= m``.
        max_block: block rows one worker should hold at most (:func:`split_oversized`).
        nprobe: a fixed number of probes, or None to choose it with ``tuning``
            (:func:`choose_nprobe`; again after splitting, which changes the blocks).
        tuning: queries with exact neighbours and a target recall; with a fixed ``nprobe``
            it only predicts that choice's recall.

    Raises:
        ValueError: neither ``nprobe`` nor ``tuning`` given.
    """
    if nprobe is None and tuning is None:
        raise ValueError("plan_blocks needs a fixed nprobe or tuning queries to choose it")
    fit = fit_spherical_kmeans(
        sample, clusters, iterations=iterations, seed=seed, precision=precision
    )

    def pick(centroids: np.ndarray) -> NprobeChoice:
        if nprobe is None:
            return choose_nprobe(centroids, sample, n_total, tuning)
        fixed = min(nprobe, len(centroids))
        work = estimated_work(nearest_centroids(sample, centroids, fixed), len(centroids), n_total)
        if tuning is None:
            return NprobeChoice(fixed, None, work, None)
        recall = shared_probe_recall(*_tuning_probes(tuning, centroids, fixed), fixed)
        return NprobeChoice(fixed, recall, work, recall >= tuning.target, ((fixed, recall, work),))

    choice = pick(fit.centroids)
    centroids, split = split_oversized(
        sample,
        fit.centroids,
        n_total,
        choice.nprobe,
        max_block,
        seed=seed,
        iterations=iterations,
        precision=precision,
    )
    if split:
        choice = pick(centroids)
    probes = nearest_centroids(sample, centroids, min(choice.nprobe, len(centroids)))
    sizes = np.bincount(probes.ravel(), minlength=len(centroids)) * n_total / len(sample)
    return BlockPlan(centroids, fit, split, choice, np.round(sizes).astype(np.int64))


def group_blocks(sizes: np.ndarray, capacity: int, min_groups: int = 1) -> np.ndarray:
    """Pack blocks into groups of about ``capacity`` rows each: ``(blocks,)`` group numbers.

    A worker holds one group's vectors at a time, so the group count is
    ``ceil(total / capacity)`` (at least ``min_groups`` for parallelism, at most one group per
    block). Blocks go largest first to the least loaded group (ties: the lower group), which
    keeps groups within one block of each other and is deterministic.
    """
    sizes = np.asarray(sizes, np.int64)
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    if not len(sizes):
        return np.zeros(0, np.int64)
    count = min(len(sizes), max(min_groups, math.ceil(int(sizes.sum()) / capacity), 1))
    loads = [(0, group) for group in range(count)]
    groups = np.empty(len(sizes), np.int64)
    for block in np.argsort(-sizes, kind="stable"):
        load, group = heapq.heappop(loads)
        groups[block] = group
        heapq.heappush(loads, (load + int(sizes[block]), group))
    return groups


class SampleTruth:
    """Exact top-``k`` of a few query vectors against all vectors, fed one batch at a time.

    Memory is the queries and their running ``k`` best (with the neighbours' vectors, which
    :func:`choose_nprobe` needs); every batch is one exact fp32 search
    (:func:`pipelines.vectors.topk.topk_neighbors`). A query's own row is left out by row number, so
    an exact duplicate of it elsewhere still counts as a neighbour.

    Example:
        >>> truth = SampleTruth(queries, query_rows, k=10)
        >>> for ids, vectors in batches:  # in row order
        ...     truth.add(ids, vectors)
        >>> true_ids, true_scores = truth.result()
    """

    def __init__(self, queries: np.ndarray, rows: np.ndarray, k: int) -> None:
        self._queries = np.ascontiguousarray(queries, dtype=np.float32)
        self._rows = np.asarray(rows, np.int64)
        self._k = k
        q, dim = self._queries.shape
        self._best_rows = np.full((q, k), -1, np.int64)
        self._best_scores = np.full((q, k), -np.inf, np.float32)
        self._best_vectors = np.zeros((q, k, dim), np.float32)
        self._ids: dict[int, str] = {}
        self._offset = 0

    def add(self, ids: Sequence[str] | pa.Array, vectors: np.ndarray) -> None:
        """Search the next batch of rows (row numbers continue from the previous batch)."""
        count = len(vectors)
        if count and len(self._queries):
            take = min(self._k + 1, count)  # one spare: the query itself may be in the batch
            found, scores = topk_neighbors(self._queries, vectors, take, exclude_self=False)
            candidates = np.concatenate([self._best_vectors, vectors[found]], axis=1)
            found = found + self._offset
            scores[found == self._rows[:, None]] = -np.inf
            rows = np.concatenate([self._best_rows, found], axis=1)
            scores = np.concatenate([self._best_scores, scores], axis=1)
            order = np.lexsort((rows, -scores), axis=1)[:, : self._k]
            self._best_rows = np.take_along_axis(rows, order, axis=1)
            self._best_scores = np.take_along_axis(scores, order, axis=1)
            self._best_vectors = np.take_along_axis(candidates, order[:, :, None], axis=1)
            fresh = np.unique(self._best_rows[self._best_rows >= self._offset])
            local = (fresh - self._offset).tolist()
            names = ids.take(pa.array(local)).to_pylist() if isinstance(ids, pa.Array) else None
            for position, row in enumerate(fresh.tolist()):
                self._ids[row] = names[position] if names is not None else ids[local[position]]
        self._offset += count

    def result(self) -> tuple[list[list[str]], np.ndarray]:
        """Per query: the ids of its exact ``k`` nearest rows, and their ``(q, k)`` scores."""
        self._check()
        names = [[self._ids[int(r)] for r in row] for row in self._best_rows]
        return names, self._best_scores

    def neighbor_vectors(self) -> np.ndarray:
        """``(q, k, d)``: the vectors of each query's exact ``k`` nearest rows."""
        self._check()
        return self._best_vectors

    def _check(self) -> None:
        if self._offset <= self._k:
            raise ValueError(f"need more than k = {self._k} rows, got {self._offset}")


def recall_at_k(
    found_ids: Sequence[Sequence[str]],
    found_scores: Sequence[Sequence[float]],
    true_ids: Sequence[Sequence[str]],
    true_scores: np.ndarray,
    k: int,
    tolerance: float = 1e-6,
) -> float:
    """Mean fraction of the exact top-``k`` that the found lists hold, counting ties as hits.

    A found neighbour is a hit when it is one of the exact ``k`` or its score is within
    ``tolerance`` of the exact ``k``-th score (another of several tied rows); without ties this
    is the usual overlap of id sets divided by ``k``.
    """
    if not len(true_ids):
        raise ValueError("recall needs at least one query")
    total = 0.0
    for ids, scores, truth, best in zip(
        found_ids, found_scores, true_ids, true_scores, strict=True
    ):
        wanted = set(truth)
        floor = float(best[-1]) - tolerance
        hits = sum(1 for i, s in zip(ids, scores, strict=True) if i in wanted or s >= floor)
        total += min(hits, k) / k
    return total / len(true_ids)
