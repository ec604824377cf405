"""Inverted lists sized before the fill: the same index, without the lists' doubling growth."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
from sbert_pipeline.index.build import ArraySource, BuildSettings, build_index
from sbert_pipeline.index.faiss_ops import prepare_vectors
from sbert_pipeline.index.list_reserve import reserve_inverted_lists


def _rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def _trained(factory: str, dim: int) -> faiss.Index:
    index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(prepare_vectors(_rows(8_000, dim, seed=1), "ip"))
    return index


def _rss() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


def _lists(index: faiss.Index) -> list[tuple[np.ndarray, np.ndarray]]:
    ivf = faiss.extract_index_ivf(index)
    lists = ivf.invlists
    out = []
    for number in range(ivf.nlist):
        size = lists.list_size(number)
        ids = faiss.rev_swig_ptr(lists.get_ids(number), size).copy()
        codes = faiss.rev_swig_ptr(lists.get_codes(number), size * lists.code_size).copy()
        out.append((ids, codes))
    return out


def _batches(vectors: np.ndarray, size: int = 4_096):
    return (vectors[start : start + size] for start in range(0, len(vectors), size))


# Flat lists, and a pre-transform with PQ codes (PCA and 4-bit codes train in a second, where
# OPQ with 8-bit codes took 20 s).
@pytest.mark.parametrize("factory", ["IVF32,Flat", "PCA8,IVF32,PQ4x4"])
def test_reserved_lists_fill_to_the_same_index(factory):
    vectors = _rows(20_000, 16)
    plain, reserved = _trained(factory, 16), _trained(factory, 16)
    assert reserve_inverted_lists(reserved, _batches(vectors), "ip") == len(vectors)
    assert reserved.ntotal == 0  # room only: no list holds a row yet
    for index in (plain, reserved):
        for batch in _batches(vectors):
            index.add(prepare_vectors(batch, "ip"))
    for (ids_a, codes_a), (ids_b, codes_b) in zip(_lists(plain), _lists(reserved), strict=True):
        assert np.array_equal(ids_a, ids_b) and np.array_equal(codes_a, codes_b)


def test_a_flat_or_hnsw_index_is_left_alone():
    for factory in ("Flat", "HNSW8"):
        index = faiss.index_factory(8, factory, faiss.METRIC_INNER_PRODUCT)
        read = []
        assert (
            reserve_inverted_lists(index, (read.append(1) or b for b in [_rows(10, 8)]), "ip") == 0
        )
        assert read == []  # nothing was read


def test_the_filled_lists_hold_what_the_planner_counts():
    # Growth by doubling leaves IVF lists about 1.5x their rows' bytes; reserved, they hold
    # the rows' bytes (code + id) and no more.
    dim, n = 64, 200_000
    vectors = _rows(n, dim, seed=2)
    payload = n * (4 * dim + 8)
    index = _trained("IVF64,Flat", dim)
    reserve_inverted_lists(index, _batches(vectors, 16_384), "ip")  # the quantizer's own memory
    index = _trained("IVF64,Flat", dim)
    before = _rss()
    reserve_inverted_lists(index, _batches(vectors, 16_384), "ip")
    for batch in _batches(vectors, 16_384):
        index.add(prepare_vectors(batch, "ip"))
    assert _rss() - before < 1.15 * payload


def test_build_index_reserves_and_finds_the_same_neighbours():
    vectors = _rows(30_000, 32, seed=3)
    built = build_index(ArraySource(vectors), BuildSettings("IVF64,Flat", metric="ip"))
    assert built.index.ntotal == len(vectors)
    assert built.tuning.recall >= 0.9
