"""queries_per_second times a slice of the queries when searching them all would be slow."""

from __future__ import annotations

import time

import numpy as np
from sbert_pipeline.index.tuning import PROBE_QUERIES, queries_per_second


class SlowIndex:
    """A stand-in index whose search takes ``per_query`` seconds a query; it counts them."""

    def __init__(self, per_query: float) -> None:
        self.per_query = per_query
        self.searched = 0

    def search(self, queries: np.ndarray, k: int):
        self.searched += len(queries)
        time.sleep(self.per_query * len(queries))
        return np.zeros((len(queries), k), np.float32), np.zeros((len(queries), k), np.int64)


def test_slow_searches_are_timed_on_a_slice_sized_to_the_time_allowed():
    index, queries = SlowIndex(0.002), np.zeros((1000, 4), np.float32)
    qps = queries_per_second(index, queries, 10, repeats=3, seconds=0.3)
    # 0.3 s over 3 repeats at 2 ms a query: about 50 queries a repeat, never all 1,000.
    assert PROBE_QUERIES + 3 * PROBE_QUERIES <= index.searched <= PROBE_QUERIES + 3 * 60
    assert 100 <= qps <= 500  # 1 / 2 ms = 500 queries/s, less the sleeps' (and load's) overhead


def test_fast_searches_time_every_query():
    index, queries = SlowIndex(0.0), np.zeros((1000, 4), np.float32)
    # 60 s allowed: a loaded machine's scheduling delays of a no-op search stay far below it
    # (with 0.3 s allowed a CI run under load timed 665 of the 1,000 queries).
    queries_per_second(index, queries, 10, repeats=3, seconds=60.0)
    assert index.searched == PROBE_QUERIES + 3 * 1000


def test_tuning_stops_where_recall_plateaus_below_the_target(caplog):
    import faiss
    from sbert_pipeline.index.tuning import PLATEAU_GAIN, tune_search_parameter
    from sbert_pipeline.vectors.exact_truth import recall_at_k

    rng = np.random.default_rng(0)
    base = rng.standard_normal((20_000, 32)).astype(np.float32)
    queries = rng.standard_normal((200, 32)).astype(np.float32)
    flat = faiss.IndexFlatL2(32)
    flat.add(base)
    _, truth = flat.search(queries, 10)
    # 4 sub-quantizers of 4 bits: codes so coarse that recall@10 stays far below 0.95.
    index = faiss.index_factory(32, "IVF64,PQ4x4")
    index.train(base)
    index.add(base)
    index.nprobe = 64
    _, found = index.search(queries, 10)
    exhaustive = recall_at_k(found, truth, 10)

    tuning = tune_search_parameter(index, queries, truth, 0.95)

    assert not tuning.reached
    assert tuning.value < 64  # the old tuner went to nprobe = nlist
    assert tuning.recall >= exhaustive - 0.02
    tried = dict(tuning.tried)
    previous = max(v for v in tried if v < tuning.value)
    assert tried[tuning.value] - tried[previous] < PLATEAU_GAIN
    assert "plateaus" in caplog.text
