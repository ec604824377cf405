"""Tuning an index's search parameter to a target recall, and measuring its throughput.

Beam-free. The search parameter (``nprobe`` for IVF, ``efSearch`` for HNSW) is set to the
smallest value whose recall@10 against the exact answer
(:class:`sbert_pipeline.vectors.exact_truth.ExactTopK`) reaches the target.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass

import faiss
import numpy as np
from sbert_pipeline.index.faiss_ops import set_search_params
from sbert_pipeline.vectors.exact_truth import recall_at_k

logger = logging.getLogger(__name__)

RECALL_K = 10
# Needing efSearch beyond this means the graph is too sparse for the data (raise M or use
# another index), not that a larger value should be searched for; tuning stops there.
MAX_EF_SEARCH = 4096
# Throughput is timed on as many queries as take about this long in all: at a near-exhaustive
# nprobe over 5M compressed vectors one search of 1,000 queries took 200-300 s, and timing
# three of them was a quarter of the index build.
THROUGHPUT_SECONDS = 15.0
# A doubling of nprobe/efSearch that gains less recall@10 than this ends the search for the
# target: on 5M planted vectors under OPQ192,IVF8192,PQ192 recall was 0.8533 at nprobe 8,
# 0.8541 at 16 and 0.8541 up to 8,192, where the tuner had gone (3 queries/s, 21 min tuning).
PLATEAU_GAIN = 0.001
PROBE_QUERIES = 32


@dataclass(frozen=True)
class SearchTuning:
    """The tuned search parameter and the recall@10 measured at each value tried."""

    parameter: str | None  # None: the index is exact and has nothing to tune
    value: int | None
    recall: float
    target: float
    tried: tuple[tuple[int, float], ...] = ()

    @property
    def reached(self) -> bool:
        """Whether the chosen value reaches the target recall."""
        return self.recall >= self.target

    @property
    def search_params(self) -> dict[str, int]:
        """``{parameter: value}`` for ``ParameterSpace``; empty for exact indexes."""
        return {} if self.parameter is None else {self.parameter: int(self.value)}


def search_parameter(index: faiss.Index) -> tuple[str, int, int] | None:
    """``(name, smallest, largest)`` of the parameter that trades speed for recall, or None."""
    if isinstance(index, faiss.IndexShards):
        index = faiss.downcast_index(index.at(0))
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        return "nprobe", 1, int(ivf.nlist)
    base = (
        faiss.downcast_index(index.index) if isinstance(index, faiss.IndexPreTransform) else index
    )
    if isinstance(base, faiss.IndexHNSW):
        return "efSearch", RECALL_K, MAX_EF_SEARCH
    return None


def tune_search_parameter(
    index: faiss.Index,
    queries: np.ndarray,
    truth: np.ndarray,
    target: float,
    k: int = RECALL_K,
) -> SearchTuning:
    """Set the smallest search parameter whose recall@k reaches ``target`` (and leave it set).

    Doubles the value until the target is met, then bisects between the last value that missed
    and the first that met it (recall grows with nprobe/efSearch). Doubling stops early when
    the last doubling gained less than :data:`PLATEAU_GAIN` recall: the index's codes, not the
    lists searched, limit it, and searching more lists only costs time. Then, as when even the
    largest value misses, the value reached is kept and the returned tuning says the target
    was not reached.
    """
    parameter = search_parameter(index)
    if parameter is None:
        _, found = index.search(queries, k)
        return SearchTuning(None, None, recall_at_k(found, truth, k), target)
    name, smallest, largest = parameter
    tried: dict[int, float] = {}

    def recall_at(value: int) -> float:
        if value not in tried:
            set_search_params(index, {name: value})
            _, found = index.search(queries, k)
            tried[value] = recall_at_k(found, truth, k)
        return tried[value]

    missed, value = None, smallest
    while recall_at(value) < target and value < largest:
        if missed is not None and recall_at(value) - recall_at(missed) < PLATEAU_GAIN:
            logger.warning(
                "recall@%d plateaus at %.4f below the target %.2f from %s=%d: the index's "
                "codes limit it (searching more costs time and gains nothing); a finer code "
                "or a Flat index reaches more",
                k,
                recall_at(value),
                target,
                name,
                value,
            )
            break
        missed, value = value, min(2 * value, largest)
    if recall_at(value) >= target and missed is not None:
        met = value
        while met - missed > 1:
            middle = (met + missed) // 2
            if recall_at(middle) >= target:
                met = middle
            else:
                missed = middle
        value = met
    set_search_params(index, {name: value})
    return SearchTuning(name, value, tried[value], target, tuple(sorted(tried.items())))


def queries_per_second(
    index: faiss.Index,
    queries: np.ndarray,
    k: int,
    repeats: int = 3,
    seconds: float = THROUGHPUT_SECONDS,
) -> float:
    """Batch search throughput: the median over ``repeats`` searches of the first queries, as
    many as take about ``seconds`` in all (every query when they are fast).

    A first search of :data:`PROBE_QUERIES` queries (also the warm-up) gives the time per
    query that sizes the timed slice.
    """
    probe = queries[:PROBE_QUERIES]
    start = time.perf_counter()
    index.search(probe, k)
    per_query = (time.perf_counter() - start) / max(len(probe), 1)
    count = len(queries)
    if per_query * count * repeats > seconds:
        count = max(len(probe), int(seconds / repeats / per_query))
    timed = queries[:count]
    measured = []
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(timed, k)
        measured.append(time.perf_counter() - start)
    return len(timed) / max(statistics.median(measured), 1e-9)
