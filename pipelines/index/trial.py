"""Choosing between HNSW and IVF-Flat by a trial on a sample of the data (Beam-free).

Memory alone cannot decide between the two: which one answers faster at the target recall
depends on how the vectors are spread. On sentence embeddings of a real corpus HNSW32 reached
recall@10 0.95 with efSearch 43 while IVF2048,Flat needed to probe 104 lists (3x slower); on
tightly clustered vectors HNSW's graph connects clusters poorly and needed efSearch ~4,000
while IVF4096,Flat needed 5 lists (100x faster the other way). So when both fit the budget,
both are built on a sample, tuned to the target on held-out sample rows, and the cost of each
at full size is predicted from what was measured:

- IVF-Flat scans ``nlist`` centroids plus the probed share of the vectors; the share of lists
  probed at the target recall is taken to carry over from the sample to full size (both use
  nlist ~ 4·sqrt(N)), so distances per query ≈ nlist_full + share·N.
- HNSW visits a number of nodes that grows with log N at a fixed recall: distances per query
  are scaled by log N / log n_sample.

Each is turned into seconds with the seconds per distance measured on the sample (which
charges HNSW's scattered memory reads and IVF's sequential scans their own rates), and the
cheaper one wins. The trial's numbers go into the index manifest.

The trial runs before the build, so it has the budget to itself (less what the process already
holds): :func:`trial_size` shrinks the sample until the sample, its IVF training copy and the
larger trial index fit (:func:`trial_bytes`), and skips the trial when too few vectors would.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass

import faiss
import numpy as np
from sbert_pipeline.index.build import VectorSource, gather_prepared, sample_positions, take_rows
from sbert_pipeline.index.faiss_ops import faiss_metric, new_index
from sbert_pipeline.index.planner import (
    IndexPlan,
    MemoryEstimate,
    hnsw_estimate,
    ivf_flat_estimate,
    ivf_nlist,
)
from sbert_pipeline.index.tuning import RECALL_K, queries_per_second, tune_search_parameter
from sbert_pipeline.vectors.memory_use import vector_bytes
from sbert_pipeline.vectors.progress import stage_progress

logger = logging.getLogger(__name__)

# Vectors the trial indexes hold: a quarter of the corpus, at least 100k and at most 1M. HNSW's
# trouble on dense clusters grows with the points per cluster: on 1M planted vectors (1,000
# clusters) a 100k sample needed efSearch 31 and misled the trial, a 500k one needed 1,526 and
# the full index 4,017. A quarter keeps the trial well under the cost of the build itself.
MIN_TRIAL_VECTORS = 100_000
MAX_TRIAL_VECTORS = 1_000_000
TRIAL_QUERIES = 500
# IVF trial k-means trains on this many points per list (FAISS's own default sample is 256).
TRAIN_POINTS_PER_LIST = 64
# Below this many vectors a trial sample says too little about the full index: a budget that
# leaves the trial less takes the planner's first choice instead.
MIN_BUDGET_TRIAL_VECTORS = 20_000
# Each step down when the trial does not fit the budget keeps this share of the sample.
SHRINK = 0.8


def trial_bytes(n_sample: int, plan: IndexPlan) -> int:
    """Memory the trial adds to the process for ``n_sample`` vectors: the sample and its
    queries, the IVF trial's training copy, and the larger of the two trial indexes (built one
    after the other)."""
    dim = plan.dim
    nlist = ivf_nlist(n_sample)
    hnsw = max((c for c in plan.considered if c.family == "hnsw"), key=lambda c: c.bytes)
    m = int(hnsw.factory.removeprefix("HNSW"))
    ivf = ivf_flat_estimate(n_sample, dim, nlist).bytes + vector_bytes(
        min(n_sample, TRAIN_POINTS_PER_LIST * nlist), dim
    )
    sample = vector_bytes(n_sample + TRIAL_QUERIES, dim)
    return sample + max(hnsw_estimate(n_sample, dim, m).bytes, ivf)


def trial_size(n: int, plan: IndexPlan | None = None, room: int | None = None) -> int:
    """Vectors in the trial sample for a corpus of ``n``: a quarter, at least 100k and at most
    1M, then shrunk until :func:`trial_bytes` fits ``room`` (the budget less what the process
    holds) when both are given; 0 when fewer than :data:`MIN_BUDGET_TRIAL_VECTORS` would fit."""
    size = min(n, max(MIN_TRIAL_VECTORS, min(n // 4, MAX_TRIAL_VECTORS)))
    if plan is None or room is None:
        return size
    while size >= MIN_BUDGET_TRIAL_VECTORS and trial_bytes(size, plan) > room:
        size = int(size * SHRINK)
    return size if size >= MIN_BUDGET_TRIAL_VECTORS else 0


@dataclass(frozen=True)
class TrialResult:
    """One candidate's measurements on the sample and its predicted cost at full size."""

    factory: str  # the full-size factory string
    trial_factory: str  # what was built on the sample
    parameter: str
    value: int
    recall: float
    distances_per_query: float
    seconds_per_query: float
    predicted_distances_per_query: float
    predicted_seconds_per_query: float


@dataclass(frozen=True)
class TrialChoice:
    """The candidate chosen and what the trial measured, for the manifest."""

    chosen: MemoryEstimate
    n_sample: int
    n_queries: int
    results: tuple[TrialResult, ...]

    def to_json(self) -> dict:
        """A JSON-ready record."""
        return {
            "chosen": self.chosen.factory,
            "sample_vectors": self.n_sample,
            "sample_queries": self.n_queries,
            "rule": "lowest predicted seconds per query at the target recall",
            "candidates": [asdict(result) for result in self.results],
        }


def trial_candidates(plan: IndexPlan) -> tuple[MemoryEstimate, MemoryEstimate] | None:
    """The best fitting HNSW and IVF-Flat of a plan, when the planner chose one of the two and
    the other fits too; None when there is nothing to weigh."""
    if plan.chosen.family not in ("hnsw", "ivf_flat"):
        return None
    fitting = [c for c in plan.considered if plan.fits(c)]
    hnsw = next((c for c in fitting if c.family == "hnsw"), None)
    ivf = next((c for c in fitting if c.family == "ivf_flat"), None)
    return (hnsw, ivf) if hnsw is not None and ivf is not None else None


def choose_by_trial(
    source: VectorSource,
    plan: IndexPlan,
    target_recall: float,
    seed: int = 0,
    n_sample: int | None = None,
    n_queries: int = TRIAL_QUERIES,
    batch_size: int = 65536,
    room: int | None = None,
) -> TrialChoice | None:
    """Build the plan's HNSW and IVF-Flat candidates on a sample and keep the faster one.

    Args:
        n_sample: vectors in the trial indexes (default :func:`trial_size`, within ``room``).
        room: bytes the trial may add to the process (the budget less what it holds); None:
            no limit.

    Returns None when the plan has only one of the two within budget (nothing to try), or when
    the room leaves too small a sample.
    """
    pair = trial_candidates(plan)
    if pair is None:
        return None
    n = plan.n
    n_sample = trial_size(n, plan, room) if n_sample is None else n_sample
    if n_sample == 0:
        logger.info(
            "no trial: the memory budget leaves room for fewer than %d trial vectors; "
            "building the planner's first choice, %s",
            MIN_BUDGET_TRIAL_VECTORS,
            plan.chosen.factory,
        )
        return None
    train_rows, query_rows = sample_positions(n, n_sample, n_queries, seed)
    rows = np.union1d(train_rows, query_rows)
    vectors = gather_prepared(source, rows, plan.metric, batch_size)
    is_query = np.isin(rows, query_rows)
    queries = vectors[is_query]
    base = take_rows(vectors, np.flatnonzero(~is_query))  # in place: no second sample
    del vectors
    _, truth = faiss.knn(queries, base, RECALL_K, metric=faiss_metric(plan.metric))
    # Each candidate is built and tuned on the sample: seconds to minutes apiece.
    with stage_progress("index trial", total=len(pair), unit="candidates") as bar:
        results = []
        for candidate in pair:
            results.append(_trial(candidate, base, queries, truth, plan, target_recall))
            bar.update()
    results = tuple(results)
    best = min(range(len(pair)), key=lambda i: results[i].predicted_seconds_per_query)
    for result in results:
        logger.info(
            "trial %s: %s=%d recall %.3f, predicted %.3f ms/query at full size",
            result.trial_factory,
            result.parameter,
            result.value,
            result.recall,
            1e3 * result.predicted_seconds_per_query,
        )
    return TrialChoice(pair[best], len(base), len(queries), results)


def _trial(
    candidate: MemoryEstimate,
    base: np.ndarray,
    queries: np.ndarray,
    truth: np.ndarray,
    plan: IndexPlan,
    target_recall: float,
) -> TrialResult:
    n_sample = len(base)
    sample_nlist = ivf_nlist(n_sample)
    if candidate.family == "ivf_flat":
        trial_factory = f"IVF{sample_nlist},Flat"
    else:
        trial_factory = candidate.factory
    start = time.perf_counter()
    index = new_index(trial_factory, plan.dim, plan.metric)
    if not index.is_trained:
        train_rows = np.random.default_rng(0).permutation(n_sample)
        index.train(base[np.sort(train_rows[: TRAIN_POINTS_PER_LIST * sample_nlist])])
    index.add(base)
    tuning = tune_search_parameter(index, queries, truth, target_recall)
    distances = _distances_per_query(index, queries)
    seconds = 1.0 / queries_per_second(index, queries, RECALL_K)
    if candidate.family == "ivf_flat":
        # Share of the vectors scanned at the sample's nprobe, carried to full size.
        share = max(distances - sample_nlist, 0.0) / n_sample
        predicted = ivf_nlist(plan.n) + share * plan.n
    else:
        predicted = distances * math.log(max(plan.n, 2)) / math.log(max(n_sample, 2))
    logger.info("trial %s built and tuned in %.1f s", trial_factory, time.perf_counter() - start)
    return TrialResult(
        factory=candidate.factory,
        trial_factory=trial_factory,
        parameter=str(tuning.parameter),
        value=int(tuning.value),
        recall=round(tuning.recall, 4),
        distances_per_query=round(distances, 1),
        seconds_per_query=seconds,
        predicted_distances_per_query=round(predicted, 1),
        predicted_seconds_per_query=seconds * predicted / max(distances, 1.0),
    )


def _distances_per_query(index: faiss.Index, queries: np.ndarray) -> float:
    """Vector distances one search computes per query, from FAISS's search statistics."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        stats = faiss.cvar.indexIVF_stats
        stats.reset()
        index.search(queries, RECALL_K)
        # The statistics count list entries scanned; the coarse quantizer adds nlist more.
        return stats.ndis / len(queries) + int(ivf.nlist)
    stats = faiss.cvar.hnsw_stats
    stats.reset()
    index.search(queries, RECALL_K)
    return stats.ndis / len(queries)
