"""queries_per_second times a slice of the queries when searching them all would be slow."""

from __future__ import annotations

import time

import numpy as np

from pipelines.index.tuning import PROBE_QUERIES, queries_per_second


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
    assert 300 <= qps <= 500  # 1 / 2 ms = 500 queries/s, less the sleeps' overhead


def test_fast_searches_time_every_query():
    index, queries = SlowIndex(0.0), np.zeros((1000, 4), np.float32)
    queries_per_second(index, queries, 10, repeats=3, seconds=0.3)
    assert index.searched == PROBE_QUERIES + 3 * 1000
