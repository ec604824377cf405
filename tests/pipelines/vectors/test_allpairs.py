import threading

import numpy as np
import pytest
import torch
from sbert_pipeline.vectors.allpairs import (
    SelfTopkStats,
    candidate_error_bound,
    self_topk,
)
from sbert_pipeline.vectors.pairs_above import pairs_above, self_pairs_above

from sbert_core.inference.precision import cpu_has_fast_bf16

PRECISIONS = ["float32", "bfloat16"]


def exact_scores(vectors: np.ndarray) -> np.ndarray:
    """All inner products in float64, rounded to float32 (what self_topk promises)."""
    as64 = vectors.astype(np.float64)
    return (as64 @ as64.T).astype(np.float32)


def brute_force(vectors: np.ndarray, k: int, rows=None):
    """Top-k other rows by exact score descending, then index ascending."""
    scores = exact_scores(vectors)
    np.fill_diagonal(scores, -np.inf)
    start, stop = rows or (0, len(vectors))
    scores = scores[start:stop]
    columns = np.broadcast_to(np.arange(len(vectors)), scores.shape)
    order = np.lexsort((columns, -scores), axis=1)[:, :k]
    return order, np.take_along_axis(scores, order, axis=1)


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def near_ties(seed: int = 0, n: int = 900, dim: int = 32) -> np.ndarray:
    """Groups of exact duplicates, tight clusters of vectors that differ by far less than
    bf16 can resolve (more members than the candidate width), some zero rows, and noise."""
    rng = np.random.default_rng(seed)
    vectors = unit(rng.standard_normal((n, dim)))
    vectors[100:160] = vectors[0]  # 61 exact duplicates: ties at every place
    base = vectors[1]
    vectors[200:300] = unit(base + 1e-4 * rng.standard_normal((100, dim)))
    vectors[300:320] = unit(base + 3e-3 * rng.standard_normal((20, dim)))
    vectors[400:405] = 0.0  # scores 0 with everything: ties
    return vectors


@pytest.fixture(scope="module")
def random_unit():
    return unit(np.random.default_rng(7).standard_normal((700, 24)))


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("k", [1, 5, 699])
def test_random_data_equals_brute_force(random_unit, k, precision):
    indices, scores = self_topk(random_unit, k, block_size=128, precision=precision)
    expected, expected_scores = brute_force(random_unit, k)
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_array_equal(scores, expected_scores)
    brute32 = random_unit @ random_unit.T  # the plain fp32 product, as the issue states it
    np.testing.assert_allclose(
        scores, np.take_along_axis(brute32, indices, axis=1), rtol=0, atol=1e-5
    )


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("k", [1, 5, 40, 899])
def test_duplicates_and_near_ties_equal_brute_force(k, precision):
    vectors = near_ties()
    stats = SelfTopkStats()
    indices, scores = self_topk(vectors, k, block_size=96, precision=precision, stats=stats)
    expected, expected_scores = brute_force(vectors, k)
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_array_equal(scores, expected_scores)
    # The duplicates of row 0 tie exactly, so the smallest other indices win, also at the k-th.
    duplicates = np.r_[0, 100:160]
    for row in (0, 100, 159):
        others = duplicates[duplicates != row]
        np.testing.assert_array_equal(indices[row, : min(k, 60)], others[: min(k, 60)])
    if k < 899:
        # A hundred near-copies of row 1 cannot be told apart within the error margin: their
        # lists are unproven and searched again, and the answer is still exact.
        assert stats.fallback_rows > 0
    assert stats.rows == len(vectors)


def test_constant_vectors_tie_everywhere_and_keep_the_smallest_indices():
    vectors = np.full((300, 8), 0.25, dtype=np.float32)
    for precision in PRECISIONS:
        indices, scores = self_topk(vectors, 4, block_size=64, precision=precision)
        expected = np.array([[j for j in range(6) if j != row][:4] for row in range(300)])
        np.testing.assert_array_equal(indices, expected)
        assert (scores == np.float32(0.5)).all()


def test_unnormalised_rows_scale_the_margin():
    rng = np.random.default_rng(2)
    vectors = near_ties(seed=2) * rng.uniform(0.05, 20.0, (900, 1)).astype(np.float32)
    indices, scores = self_topk(vectors, 7, block_size=128, precision="bfloat16")
    expected, expected_scores = brute_force(vectors, 7)
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_array_equal(scores, expected_scores)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_precisions_agree_bit_for_bit(precision):
    vectors = near_ties(seed=3, n=1200)
    reference = self_topk(vectors, 10, block_size=256, precision="float32")
    result = self_topk(vectors, 10, block_size=200, precision=precision)
    np.testing.assert_array_equal(result[0], reference[0])
    np.testing.assert_array_equal(result[1], reference[1])


@pytest.mark.parametrize("rows", [(0, 0), (0, 1), (250, 600), (899, 900), (0, 900)])
def test_row_ranges_equal_the_full_answer(rows):
    vectors = near_ties(seed=4)
    indices, scores = self_topk(vectors, 6, rows=rows, block_size=100)
    expected, expected_scores = brute_force(vectors, 6, rows)
    assert indices.shape == (rows[1] - rows[0], 6)
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_array_equal(scores, expected_scores)


def test_default_block_and_auto_precision_report_their_choice():
    vectors = near_ties(seed=5, n=1500)
    stats = SelfTopkStats()
    indices, _ = self_topk(vectors, 10, stats=stats)
    np.testing.assert_array_equal(indices, brute_force(vectors, 10)[0])
    assert stats.precision == ("bfloat16" if cpu_has_fast_bf16() else "float32")
    assert stats.candidate_width == 42
    assert stats.rescored_pairs >= 1500 * 10 // 2  # each unordered pair is rescored once


def test_two_rows():
    vectors = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    indices, scores = self_topk(vectors, 1)
    np.testing.assert_array_equal(indices, [[1], [0]])
    np.testing.assert_array_equal(scores, np.full((2, 1), np.float32(0.6)))


def test_bf16_error_bound_holds_on_adversarial_pairs():
    """The bound behind the proof, checked against float64 on pairs that make bf16 rounding
    hurt most: nearly parallel vectors, one large coordinate, and mantissas just below a bf16
    rounding midpoint."""
    rng = np.random.default_rng(11)
    dim = 384
    base = rng.standard_normal((64, dim))
    spiky = np.zeros((64, dim))
    spiky[:, 0] = 1.0
    spiky[:, 1:] = 1e-3 * rng.standard_normal((64, dim - 1))
    # 1 + 2^-8 - 2^-24 rounds down to 1 in bf16 (8 significant bits): almost the whole
    # unit roundoff, in the same direction for every coordinate.
    midpoints = np.sign(base) * (1 + 2.0**-8 - 2.0**-24) * 2.0 ** rng.integers(-3, 3, base.shape)
    scaled = np.concatenate([base, base + 1e-3 * rng.standard_normal(base.shape), spiky])
    scaled = unit(scaled) * rng.uniform(0.5, 2.0, (len(scaled), 1))
    vectors = np.concatenate([scaled, midpoints]).astype(np.float32)
    as_torch = torch.from_numpy(vectors).bfloat16()
    candidate = (as_torch @ as_torch.T).double().numpy()
    exact = exact_scores(vectors).astype(np.float64)
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    observed = np.abs(candidate - exact) / np.outer(norms, norms)
    bound = candidate_error_bound(dim, bf16=True)
    assert observed.max() <= bound
    assert observed.max() > bound / 10  # the data does exercise the bound
    candidate32 = vectors @ vectors.T
    observed32 = np.abs(candidate32 - exact) / np.outer(norms, norms)
    assert observed32.max() <= candidate_error_bound(dim, bf16=False)


@pytest.mark.parametrize(
    ("vectors", "k", "message"),
    [
        (np.ones((5, 3), np.float32), 0, "k must be between 1 and 4"),
        (np.ones((5, 3), np.float32), 5, "k must be between 1 and 4"),
        (np.ones((1, 3), np.float32), 1, "at least 2 vectors"),
        (np.ones(5, np.float32), 1, "2-d"),
        (np.ones((5, 3, 2), np.float32), 1, "2-d"),
        (np.ones((5, 0), np.float32), 1, "d >= 1"),
        (np.array([[1.0, np.nan], [0.0, 1.0]], np.float32), 1, "NaN or infinite"),
        (np.array([[1.0, np.inf], [0.0, 1.0]], np.float32), 1, "NaN or infinite"),
        (np.array([[1e30, 0.0], [0.0, 1.0]], np.float32), 1, "norms must stay below"),
    ],
)
def test_bad_input_is_refused(vectors, k, message):
    with pytest.raises(ValueError, match=message):
        self_topk(vectors, k)


def test_bad_options_are_refused(random_unit):
    with pytest.raises(ValueError, match="rows must satisfy"):
        self_topk(random_unit, 3, rows=(10, 5))
    with pytest.raises(ValueError, match="rows must satisfy"):
        self_topk(random_unit, 3, rows=(0, 701))
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        self_topk(random_unit, 3, block_size=0)
    with pytest.raises(ValueError, match="precision must be"):
        self_topk(random_unit, 3, precision="float16")


def brute_pairs(vectors: np.ndarray, threshold: float):
    scores = exact_scores(vectors)
    a, b = np.nonzero(np.triu(scores >= np.float32(threshold), k=1))
    return a, b, scores[a, b]


def test_pairs_above_from_complete_lists_equals_brute_force():
    vectors = near_ties(seed=6, n=400)
    indices, scores = self_topk(vectors, 399)
    a, b, s = pairs_above(indices, scores, 0.5)
    expected = brute_pairs(vectors, 0.5)
    np.testing.assert_array_equal(a, expected[0])
    np.testing.assert_array_equal(b, expected[1])
    np.testing.assert_array_equal(s, expected[2])
    assert (a < b).all()


def test_pairs_above_from_top_k_lists_keeps_only_listed_pairs():
    vectors = near_ties(seed=7, n=400)
    k = 3
    indices, scores = self_topk(vectors, k)
    a, b, s = pairs_above(indices, scores, 0.2)
    listed = {(min(r, int(c)), max(r, int(c))) for r in range(400) for c in indices[r]}
    all_a, all_b, all_s = brute_pairs(vectors, 0.2)
    expected = [(x, y, z) for x, y, z in zip(all_a, all_b, all_s, strict=True) if (x, y) in listed]
    assert list(zip(a, b, s, strict=True)) == expected
    assert len(expected) < len(all_a)  # the lists do cap what is found (documented)


def test_pairs_above_with_a_row_offset_and_empty_results():
    vectors = near_ties(seed=8, n=450)
    indices, scores = self_topk(vectors, 449, rows=(100, 450))
    a, b, _ = pairs_above(indices, scores, 0.3, row_offset=100)
    expected_a, expected_b, _ = brute_pairs(vectors, 0.3)
    touching = (expected_a >= 100) | (expected_b >= 100)
    np.testing.assert_array_equal(a, expected_a[touching])
    np.testing.assert_array_equal(b, expected_b[touching])
    none = pairs_above(indices[:0], scores[:0], 0.5, row_offset=100)
    assert [part.dtype for part in none] == [np.int64, np.int64, np.float32]
    assert all(len(part) == 0 for part in none)


def test_pairs_above_refuses_bad_input():
    with pytest.raises(ValueError, match="threshold must lie in"):
        pairs_above(np.zeros((2, 1), np.int64), np.zeros((2, 1), np.float32), 1.5)
    with pytest.raises(ValueError, match="same shape"):
        pairs_above(np.zeros((2, 1), np.int64), np.zeros((2, 2), np.float32), 0.5)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("threshold", [-1.0, 0.3, 0.95, 1.0])
def test_self_pairs_above_finds_every_pair(threshold, precision):
    vectors = near_ties(seed=9, n=500)
    a, b, s = self_pairs_above(vectors, threshold, block_size=64, precision=precision)
    expected_a, expected_b, expected_s = brute_pairs(vectors, threshold)
    np.testing.assert_array_equal(a, expected_a)
    np.testing.assert_array_equal(b, expected_b)
    np.testing.assert_array_equal(s, expected_s)


def test_self_pairs_above_row_ranges_partition_the_pairs():
    vectors = near_ties(seed=10, n=400)
    whole = self_pairs_above(vectors, 0.4)
    parts = [self_pairs_above(vectors, 0.4, rows=r) for r in [(0, 150), (150, 151), (151, 400)]]
    for full, *pieces in zip(whole, *parts, strict=True):
        np.testing.assert_array_equal(full, np.concatenate(pieces))
    with pytest.raises(ValueError, match="threshold must lie in"):
        self_pairs_above(vectors, -1.5)


def test_a_failing_worker_raises_instead_of_leaving_the_others_waiting(monkeypatch):
    """A worker that fails on a diagonal tile must not leave another waiting for that block."""
    from sbert_pipeline.vectors import allpairs

    original = allpairs._CandidateLists.scan

    def scan(self, tile, rows, columns, both_sides, start):
        if rows == columns and rows[0] == 100:  # the second block's diagonal tile
            raise RuntimeError("scan failed")
        return original(self, tile, rows, columns, both_sides, start)

    monkeypatch.setattr(allpairs._CandidateLists, "scan", scan)
    vectors = unit(np.random.default_rng(5).standard_normal((400, 8)))
    outcome = {}

    def call():
        try:
            self_topk(vectors, 3, block_size=100)
        except RuntimeError as error:
            outcome["error"] = str(error)

    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        caller.join(timeout=60)
    finally:
        torch.set_num_threads(previous)
    assert not caller.is_alive(), "self_topk hung after a worker failed"
    assert outcome == {"error": "scan failed"}
