"""Spherical k-means (cosine) on L2-normalised float32 vectors, Beam-free.

A fit is a seeding (:func:`seed_centroids`: k-means|| candidates on a pool of the vectors,
averaged over their pool members, reduced to k by greedy k-means++) followed by Lloyd iterations
with empty clusters re-seeded. A distributed refinement pass is :func:`centroid_sums` on each part
of the data, merged with :meth:`CentroidSums.merge`, then turned into new centroids. Assignment of
any number of vectors is :func:`assign`.

Everything is cosine: vectors and centroids are unit rows, a vector belongs to the centroid with
the largest inner product, and a centroid is the normalised sum of its members. The **objective**
is the sum over vectors of the cosine distance ``1 - cos(x, c_label)``; for unit vectors this is
half the squared-L2 inertia, so minimising one minimises the other.

Assignment is fast and exact: on CPUs that multiply bf16 matrices natively, the best and second
best centroids are found with a bf16 matrix product (2-3x the fp32 throughput on AVX512-BF16),
the best is re-scored in fp32, and a per-row error bound proves that no other centroid can beat
it in fp32; the rows without that proof (a few percent on real sentence embeddings, where
clusters touch) are scored against every centroid in fp32. Labels are therefore always the fp32
nearest centroid (up to fp32 rounding of exact ties).

Example:
    >>> fit = fit_spherical_kmeans(vectors, k=100, seed=0)
    >>> labels, scores = assign(vectors, fit.centroids)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import torch
from sbert_pipeline.vectors.checks import require_finite
from sbert_pipeline.vectors.precision import Precision, normalize_rows, one_thread, use_bf16
from sbert_pipeline.vectors.progress import Progress, stage_progress
from sbert_pipeline.vectors.records import field_record

logger = logging.getLogger(__name__)


# Unit roundoff of bfloat16 (8 significant bits, round to nearest): |bf16(v) - v| <= u |v|.
_BF16_ROUNDOFF = 2.0**-8
_FP32_ROUNDOFF = 2.0**-24
# A vector this close (cosine distance) to its own centroid is a duplicate of it for fp32: a new
# centroid there would sit on top of the old one and empty again at once, so it re-seeds nothing.
_MIN_RESEED_DISTANCE = 1e-5


@dataclass(frozen=True)
class Assignment:
    """Each vector's nearest centroid and the cosine similarity to it."""

    labels: np.ndarray  # (N,) int64
    scores: np.ndarray  # (N,) float32, cos(x, c_label)

    @property
    def objective(self) -> float:
        """Sum of cosine distances ``1 - score`` (float64 accumulation)."""
        return float(np.sum(1.0 - self.scores.astype(np.float64)))


@dataclass
class CentroidSums:
    """Per-centroid sums of member vectors: the partial result of one Lloyd pass over a shard.

    Partial sums of disjoint parts of the data add up (:meth:`merge`), which is how a Lloyd pass
    is distributed: each worker sums its shard, the sums are combined, and :meth:`centroids` gives
    the next centroids.
    """

    sums: np.ndarray  # (k, d) float64
    counts: np.ndarray  # (k,) int64
    objective: float = 0.0  # sum of cosine distances of the summed vectors to the old centroids

    @classmethod
    def zeros(cls, k: int, dim: int) -> CentroidSums:
        """The neutral element of :meth:`merge`."""
        return cls(np.zeros((k, dim), np.float64), np.zeros(k, np.int64), 0.0)

    def merge(self, other: CentroidSums) -> CentroidSums:
        """The sums of both parts (a new object; neither input changes)."""
        return CentroidSums(
            self.sums + other.sums, self.counts + other.counts, self.objective + other.objective
        )

    def centroids(self, previous: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """New unit centroids, and a mask of the clusters that had no member.

        A cluster without members keeps its previous centroid: the caller decides whether to
        re-seed it (the fit does) or to report it.
        """
        empty = self.counts == 0
        updated = normalize_rows(self.sums.astype(np.float32))
        updated[empty] = previous[empty]
        return updated, empty


# KMeansFit attributes under another name in the manifest.
_FIT_KEYS = {
    "objective": "objective_sample",
    "reseeded": "reseeded_clusters",
    "n_fitted": "sample_size",
}


@dataclass(frozen=True)
class KMeansFit:
    """A fitted spherical k-means model and how the fit went."""

    centroids: np.ndarray  # (k, d) float32, unit rows
    objective: float  # sum of cosine distances of the fitted vectors, exact fp32 assignment
    iterations: int  # Lloyd iterations run (early stop on ``tolerance``)
    converged: bool  # stopped because the objective improved by less than ``tolerance``
    reseeded: int  # empty clusters re-seeded during the fit, over all iterations
    empty_clusters: int  # clusters still without a member after the fit (only with duplicates)
    n_fitted: int  # vectors the model was fitted on
    seed: int
    history: list[float] = field(default_factory=list)  # objective of each iteration's assignment

    def describe(self) -> dict:
        """What a manifest records about the fit."""
        return field_record(self, _FIT_KEYS, skip=("centroids", "history"))


def assign(
    vectors: np.ndarray,
    centroids: np.ndarray,
    *,
    precision: Precision = "auto",
    block_size: int = 8192,
) -> Assignment:
    """The nearest centroid (largest inner product) of every vector.

    Args:
        vectors: ``(N, d)`` float32, unit rows.
        centroids: ``(k, d)`` float32, unit rows.
        precision: ``bfloat16`` candidate search, ``float32`` throughout, or ``auto``. Labels
            and scores are fp32 either way: bf16 only proposes the candidate.
        block_size: vectors per matrix product (bounds the ``block_size x k`` score buffer).

    Returns:
        Labels and fp32 cosine scores.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    centroids_t = torch.from_numpy(np.ascontiguousarray(centroids, dtype=np.float32))
    n, k = len(vectors), len(centroids_t)
    labels = np.empty(n, np.int64)
    scores = np.empty(n, np.float32)
    bf16 = use_bf16(precision) and k > 1
    centroids_bf16 = centroids_t.to(torch.bfloat16) if bf16 else None
    max_centroid_norm = float(torch.linalg.vector_norm(centroids_t, dim=1).max()) if k else 0.0
    with torch.inference_mode():
        for start in range(0, n, block_size):
            block = torch.from_numpy(vectors[start : start + block_size])
            if not bf16:
                best, label = (block @ centroids_t.T).max(dim=1)
            else:
                best, label = _assign_block_bf16(
                    block, centroids_t, centroids_bf16, max_centroid_norm
                )
            labels[start : start + len(block)] = label.numpy()
            scores[start : start + len(block)] = best.numpy()
    return Assignment(labels, scores)


def _assign_block_bf16(
    block: torch.Tensor,
    centroids: torch.Tensor,
    centroids_bf16: torch.Tensor,
    max_centroid_norm: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32-exact nearest centroids of one block via a bf16 candidate; see :func:`assign`."""
    approx = block.to(torch.bfloat16) @ centroids_bf16.T  # (b, k) bf16
    top_scores, top_ids = approx.topk(2, dim=1)  # (b, 2)
    label = top_ids[:, 0].contiguous()
    best = (centroids[label] * block).sum(dim=1)  # (b,) fp32 score of the bf16 winner
    # |bf16 score - true score| <= (2u + u^2) |x||c| from rounding both inputs, plus u |x||c|
    # from rounding the output, plus fp32 accumulation error on both sides (d u_32 each). Every
    # other centroid scores at most top_scores[:, 1] + bound in fp32, so a winner above that is
    # the fp32 nearest centroid. (Measured errors are about 5x below the bound.)
    u, dim = _BF16_ROUNDOFF, block.shape[1]
    factor = 3 * u + u * u + 2 * dim * _FP32_ROUNDOFF
    bound = factor * torch.linalg.vector_norm(block, dim=1) * max_centroid_norm
    unproven = best <= top_scores[:, 1].float() + bound
    if bool(unproven.any()):
        rows = unproven.nonzero().squeeze(1)
        full_best, full_label = (block[rows] @ centroids.T).max(dim=1)
        best[rows] = full_best
        label[rows] = full_label
    return best, label


def kmeans_plusplus(
    vectors: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    weights: np.ndarray | None = None,
    local_trials: int | None = None,
) -> np.ndarray:
    """Greedy (weighted) k-means++ seeding (Arthur & Vassilvitskii 2007): indices of ``k`` rows.

    Each new seed is the best of ``local_trials`` rows drawn with probability proportional to
    weight times squared distance to the nearest seed so far ("best": lowest weighted potential
    afterwards). When every weighted row coincides with a seed (fewer distinct rows than ``k``),
    the remaining seeds are the first unused rows, and the fit reports the clusters left empty.

    Args:
        vectors: ``(m, d)`` float32 unit rows, ``m >= k``.
        k: number of seeds.
        rng: the random source (the fit's seed makes the result deterministic).
        weights: ``(m,)`` non-negative row weights (default all 1).
        local_trials: draws per seed; default ``2 + 2 ln k`` (twice the usual greedy count: the
            tail of the seeding, when most clusters already hold a seed, is where a draw that
            lands in a covered cluster costs a cluster, and each extra draw halves that risk).
    """
    m = len(vectors)
    if not 1 <= k <= m:
        raise ValueError(f"k-means++ needs 1 <= k <= number of vectors, got k={k}, n={m}")
    trials = local_trials or 2 + int(2 * math.log(k))
    points = torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))
    weight = torch.ones(m) if weights is None else torch.from_numpy(weights.astype(np.float32))
    chosen = np.empty(k, np.int64)
    chosen[0] = _draw(weight.numpy(), rng, 1)[0]
    with torch.inference_mode(), one_thread():
        # Squared L2 distance between unit rows is 2 - 2 cos.
        closest = (2 - 2 * (points @ points[chosen[0]])).clamp_(min=0)  # (m,)
        for i in range(1, k):
            draws = _draw((weight * closest).numpy(), rng, trials)
            if draws is None:
                unused = np.setdiff1d(np.arange(m), chosen[:i], assume_unique=True)
                chosen[i:] = unused[: k - i]
                break
            # (trials, m): this orientation of the product is 2x faster than (m, trials).
            distances = (2 - 2 * (points[draws] @ points.T)).clamp_(min=0)
            after = torch.minimum(closest.unsqueeze(0), distances)
            best = int((after @ weight).argmin())
            chosen[i] = draws[best]
            closest = after[best]
    return chosen


def _draw(mass: np.ndarray, rng: np.random.Generator, size: int) -> np.ndarray | None:
    """``size`` row indices drawn with probability proportional to ``mass``; None if all zero."""
    cumulative = np.cumsum(mass, dtype=np.float64)
    if cumulative[-1] <= 0:
        return None
    # side="right" never lands on a zero-mass row (for k-means++: an existing seed).
    draws = np.searchsorted(cumulative, rng.random(size) * cumulative[-1], side="right")
    return np.minimum(draws, len(mass) - 1)


def oversample_candidates(
    pool: np.ndarray, n_candidates: int, rng: np.random.Generator, *, rounds: int = 5
) -> np.ndarray:
    """k-means|| (Bahmani et al. 2012): about ``n_candidates`` rows of ``pool``, spread out.

    Starting from one random row, each round keeps every row independently with probability
    ``min(1, l D^2 / sum D^2)`` (``l = n_candidates / rounds``), where ``D`` is the distance to the
    nearest row kept so far. Rounds are matrix products, not a sequential loop over seeds.
    """
    m = len(pool)
    points = torch.from_numpy(pool)
    per_round = n_candidates / rounds
    kept = [int(rng.integers(m))]
    with torch.inference_mode():
        closest = (2 - 2 * (points @ points[kept[0]])).clamp_(min=0)
        for _ in range(rounds):
            mass = closest.numpy().astype(np.float64)
            total = mass.sum()
            if total <= 0:
                break
            new = np.flatnonzero(rng.random(m) < per_round * mass / total)
            if not len(new):
                continue
            kept.extend(new.tolist())
            distances = (2 - 2 * (points[new] @ points.T)).clamp_(min=0)  # (new, m)
            closest = torch.minimum(closest, distances.min(dim=0).values)
    return np.unique(np.asarray(kept, np.int64))


def seed_centroids(
    data: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    pool_size: int,
    oversampling: float = 2.0,
    precision: Precision = "auto",
) -> np.ndarray:
    """Initial unit centroids: k-means|| candidates, de-noised by Lloyd, reduced by k-means++.

    In high dimension two random members of one cluster are far apart (at a cosine of 0.5 their
    squared distance is half that between clusters), so k-means++ on raw vectors often puts two
    seeds in one cluster and none in another. Here ``oversampling * k`` candidates are drawn on a
    pool of the data (enough that every cluster holds some), each replaced by the mean of its
    pool members (means of a few members are close to their cluster centre), then weighted greedy
    k-means++ picks ``k`` of those means with weights = members.

    Args:
        data: ``(n, d)`` unit rows.
        k: centroids wanted.
        rng: random source.
        pool_size: rows the candidates are drawn from and averaged over.
        oversampling: candidates per centroid.
        precision: of the assignments, see :func:`assign`.
    """
    pool = data[np.sort(rng.permutation(len(data))[: max(pool_size, k)])]
    if len(pool) <= oversampling * k:
        return pool[kmeans_plusplus(pool, k, rng)]
    candidates = pool[oversample_candidates(pool, int(oversampling * k), rng)]
    for _ in range(2):
        sums = _sums(pool, assign(pool, candidates, precision=precision), len(candidates))
        candidates, _ = sums.centroids(candidates)
    # Members in the last pass, before its update moved the means a little: good enough as weights
    # and one assignment cheaper than counting again.
    weights = sums.counts
    keep = weights > 0
    candidates, weights = candidates[keep], weights[keep]
    if len(candidates) < k:  # rare: fewer distinct candidates than k; top up from the pool
        candidates = np.concatenate([candidates, pool[: k - len(candidates)]])
        weights = np.concatenate([weights, np.ones(k - len(weights), weights.dtype)])
    return candidates[kmeans_plusplus(candidates, k, rng, weights=weights)]


def centroid_sums(
    vectors: np.ndarray,
    centroids: np.ndarray,
    *,
    precision: Precision = "auto",
    block_size: int = 8192,
) -> CentroidSums:
    """One Lloyd pass over a part of the data: assign (exactly), then sum members per centroid.

    Args:
        vectors: ``(N, d)`` unit rows of one shard or batch.
        centroids: ``(k, d)`` current unit centroids.
    """
    assignment = assign(vectors, centroids, precision=precision, block_size=block_size)
    return _sums(vectors, assignment, len(centroids))


def _sums(vectors: np.ndarray, assignment: Assignment, k: int) -> CentroidSums:
    sums = torch.zeros(k, vectors.shape[1], dtype=torch.float32)
    with one_thread():  # a scatter-add is memory-bound; two threads were 5x slower here
        sums.index_add_(0, torch.from_numpy(assignment.labels), torch.from_numpy(vectors))
    counts = np.bincount(assignment.labels, minlength=k).astype(np.int64)
    return CentroidSums(sums.numpy().astype(np.float64), counts, assignment.objective)


def lloyd_pass(
    batches: Iterable[np.ndarray],
    centroids: np.ndarray,
    *,
    precision: Precision = "auto",
    progress: Progress | None = None,
) -> CentroidSums:
    """A full-data refinement pass: :func:`centroid_sums` of every batch, merged.

    The batches can come from disk one at a time, so memory stays at one batch. ``progress``,
    if given, counts the vectors of each batch done.
    """
    total = CentroidSums.zeros(*centroids.shape)
    for batch in batches:
        total = total.merge(centroid_sums(normalize_rows(batch), centroids, precision=precision))
        if progress is not None:
            progress.update(len(batch))
    return total


def reseed_empty(
    labels: np.ndarray, scores: np.ndarray, counts: np.ndarray, empty: np.ndarray
) -> int:
    """Give each empty cluster the vector farthest from its own centroid, in place.

    Donors are taken in order of increasing score from clusters that keep at least one member,
    so no cluster is emptied to fill another, and only if they are not (nearly) on top of their
    own centroid. Deterministic: ties go to the lower row index.

    Args:
        labels, scores: the current assignment (``labels`` and ``counts`` are updated).
        counts: members per cluster.
        empty: indices of the clusters without members.

    Returns:
        How many clusters were re-seeded (fewer than ``len(empty)`` only when no vector is
        left that could move: the data has fewer distinct vectors than clusters).
    """
    reseeded = 0
    order = np.argsort(scores, kind="stable")
    order = order[scores[order] < 1 - _MIN_RESEED_DISTANCE]
    position = 0
    for cluster in empty:
        while position < len(order) and counts[labels[order[position]]] <= 1:
            position += 1
        if position == len(order):
            break
        row = order[position]
        counts[labels[row]] -= 1
        labels[row] = cluster
        counts[cluster] = 1
        position += 1
        reseeded += 1
    return reseeded


def fit_spherical_kmeans(
    vectors: np.ndarray,
    k: int,
    *,
    iterations: int = 20,
    seed: int = 0,
    tolerance: float = 1e-4,
    seeding_pool: int | None = None,
    precision: Precision = "auto",
    block_size: int = 8192,
) -> KMeansFit:
    """Fit ``k`` unit centroids to ``vectors`` (normalised here) by cosine.

    Args:
        vectors: ``(n, d)`` float32; rows are L2-normalised before fitting.
        k: number of clusters, ``1 <= k <= n``.
        iterations: at most this many Lloyd iterations.
        seed: makes the fit deterministic (same machine and thread count: the order of floating
            point sums inside the matrix library can depend on the number of threads).
        tolerance: stop once an iteration improves the objective by less than this fraction.
        seeding_pool: vectors the seeding draws and averages candidates from (default
            ``min(n, 16 k)``; on a planted 1,000-cluster mixture 16 per cluster gave an ARI of
            0.99 where 8 gave 0.97 and 4 gave 0.96).
        precision: see :func:`assign`.
        block_size: see :func:`assign`.

    Raises:
        ValueError: ``k`` out of range, no vectors, a bad option, or a NaN or infinite value
            (one such row would pull every centroid to NaN and every row into one cluster).
    """
    n = len(vectors)
    _check_fit(vectors, k, iterations)
    data = normalize_rows(vectors)
    rng = np.random.default_rng(seed)
    pool_size = min(n, seeding_pool or 16 * k)
    centroids = seed_centroids(data, k, rng, pool_size=pool_size, precision=precision)

    history: list[float] = []
    reseeded = 0
    converged = False
    bar = stage_progress("k-means", total=iterations, unit="iterations")
    bar.start()
    for _ in range(iterations):
        current = assign(data, centroids, precision=precision, block_size=block_size)
        counts = np.bincount(current.labels, minlength=k)
        empty = np.flatnonzero(counts == 0)
        moved = reseed_empty(current.labels, current.scores, counts, empty) if len(empty) else 0
        reseeded += moved
        centroids, _ = _sums(data, current, k).centroids(centroids)
        history.append(current.objective)
        bar.update()  # converging stops short of the total
        if len(history) > 1 and not moved:
            previous, latest = history[-2], history[-1]
            if previous - latest <= tolerance * max(previous, 1e-12):
                converged = True
                break
    bar.close()
    final = assign(data, centroids, precision=precision, block_size=block_size)
    empty_clusters = int(np.sum(np.bincount(final.labels, minlength=k) == 0))
    if empty_clusters:
        logger.warning(
            "k-means left %d of %d clusters empty (no distinct vector was left to re-seed them; "
            "usually the data has fewer distinct vectors than k)",
            empty_clusters,
            k,
        )
    return KMeansFit(
        centroids=centroids,
        objective=final.objective,
        iterations=len(history),
        converged=converged,
        reseeded=reseeded,
        empty_clusters=empty_clusters,
        n_fitted=n,
        seed=seed,
        history=history,
    )


def _check_fit(vectors: np.ndarray, k: int, iterations: int) -> None:
    """Refuse what :func:`fit_spherical_kmeans` cannot fit (see its Raises)."""
    n = len(vectors)
    if n == 0:
        raise ValueError("cannot fit k-means on zero vectors")
    require_finite(vectors)
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the number of vectors ({n}), got {k}")
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
