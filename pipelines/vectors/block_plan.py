"""Planning a cluster-blocked all-pairs search (SemDeDup-style) (Beam-free).

The clustered mode of ``sbert pairs`` cuts the vectors into many overlapping blocks, each
searched exactly (:func:`sbert_pipeline.vectors.block_search.search_block`):

1. :func:`plan_blocks` fits spherical k-means (``sbert_pipeline.vectors.kmeans``) on a sample,
chooses
   how many centroids each vector probes (:func:`choose_nprobe`) and splits any cluster whose
   block would be larger than a cap (:func:`split_oversized`), so that one block fits a worker.
2. :func:`nearest_centroids` assigns every vector to its ``nprobe`` nearest centroids; block
   ``c`` is every vector that has ``c`` among them. Near neighbours usually share a nearest
   centroid; probing more than one catches the pairs that straddle a cluster border.
   :func:`group_blocks` packs blocks into groups of bounded size, one worker's share at a time.
3. Each block is searched exactly; ``sbert_pipeline.pairs.merge`` then combines the candidate lists
   an item got from its blocks (best score per neighbour, then score descending, ties by id)
   and drops the pairs found in more than one block.

What the blocking misses is predicted and measured, not guessed. An item's merged list is its
exact top-k over the union of its blocks, so it holds a true neighbour exactly when the two
share a probed centroid: :func:`shared_probe_recall` gives the recall of any ``nprobe`` from
the probes of a few queries and their exact neighbours (a :class:`ProbeTuning`), which is how
``nprobe`` is chosen. :class:`sbert_pipeline.vectors.exact_truth.ExactTopK` computes those exact
neighbours for a random sample of queries (streamed, bounded memory), and
:func:`sbert_pipeline.vectors.exact_truth.recall_at_k` compares the written lists with them.

Scores are inner products of the rows as given, so pass L2-normalised rows for cosine.
"""

from __future__ import annotations

import heapq
import logging
import math
from dataclasses import dataclass

import numpy as np
import torch
from sbert_pipeline.vectors.kmeans import KMeansFit, assign, fit_spherical_kmeans
from sbert_pipeline.vectors.precision import Precision
from sbert_pipeline.vectors.records import field_record

logger = logging.getLogger(__name__)

# Vectors compared with the centroids at a time when assigning: a (8192, C) score tile.
_ASSIGN_BLOCK = 8192


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
        reached: whether ``predicted_recall`` reached the target (None: not tuned).
        work: estimated exact work of all blocks, as a fraction of searching all pairs.
        curve: ``(nprobe, predicted recall, work)`` of every value tried.
    """

    nprobe: int
    predicted_recall: float | None
    reached: bool | None
    work: float
    curve: tuple[tuple[int, float, float], ...] = ()

    def describe(self) -> dict:
        """What a manifest records about the choice."""
        return field_record(
            self,
            {"reached": "target_reached", "work": "estimated_work_fraction"},
            curve=[
                {"nprobe": p, "predicted_recall": r, "work_fraction": w} for p, r, w in self.curve
            ],
        )


@dataclass(frozen=True)
class ProbeTuning:
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
    tuning: ProbeTuning,
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
    return NprobeChoice(nprobe, recall, recall >= tuning.target, work, tuple(curve))


def _tuning_probes(tuning: ProbeTuning, centroids: np.ndarray, top: int):
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
    tuning: ProbeTuning | None = None,
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
            return NprobeChoice(fixed, None, None, work)
        recall = shared_probe_recall(*_tuning_probes(tuning, centroids, fixed), fixed)
        return NprobeChoice(fixed, recall, recall >= tuning.target, work, ((fixed, recall, work),))

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
