"""The compiled tile scan and exact rescoring kernels, against numpy."""

import numpy as np
import pytest
import torch
from sbert_pipeline.vectors.exact_scores import pair_scores_into, rescored_topk
from sbert_pipeline.vectors.tile_scan import admission_key, scan_tile, start_lists

WIDTH, K = 12, 3
BF16, FP32 = 16, 0


def empty_lists(m: int, margin: float = np.inf):
    """Lists whose threshold is their w-th best only (an infinite margin never binds)."""
    return (
        np.full((m, WIDTH), -np.inf, np.float32),
        np.full((m, WIDTH), -1, np.int64),
        np.full(m, -np.inf, np.float32),
        np.full(m, np.iinfo(np.int32).min, np.int32),
        np.full(m, margin, np.float32),
    )


def keys_of(tile: torch.Tensor) -> np.ndarray:
    return tile.view(torch.int16 if tile.dtype == torch.bfloat16 else torch.int32).numpy()


def top_w(values: np.ndarray, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Descending by value, ties by the smaller column, first WIDTH."""
    order = np.lexsort((columns, -values))[:WIDTH]
    return values[order], columns[order]


@pytest.mark.parametrize("shift", [BF16, FP32])
def test_admission_key_admits_exactly_the_scores_above_a_threshold(shift):
    rng = np.random.default_rng(0)
    values = np.r_[0.0, rng.uniform(0, 1, 500), rng.uniform(-1, 0, 100)].astype(np.float32)
    tile = torch.from_numpy(values)
    if shift == BF16:
        tile = tile.bfloat16()
    keys = keys_of(tile)
    exact = tile.float().numpy()
    lowest = -32768 if shift == BF16 else -(2**31)
    scratch = np.zeros(1, np.int32)
    for threshold in np.r_[exact[:50], rng.uniform(0, 1, 50), -0.5, -np.inf].astype(np.float32):
        key = admission_key(threshold, shift, lowest, scratch)
        if threshold >= 0:
            np.testing.assert_array_equal(keys >= key, exact > threshold)
        else:
            assert key == lowest  # every score passes; floats decide


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_start_lists_hold_each_rows_best_scores_with_ties_by_column(dtype):
    rng = np.random.default_rng(1)
    scores = rng.uniform(0, 1, (40, 200)).astype(np.float32)
    scores[:, 50:60] = 0.99  # ten equal best scores per row, more ties below
    scores[5] = 0.25  # a row of ties only
    scores[6] = -0.5  # a negative row: every score must be looked at
    tile = torch.from_numpy(scores).to(dtype)
    lists = empty_lists(40)
    start_lists(keys_of(tile), 40, 200, 0, 1000, *lists, K, BF16 if dtype == torch.bfloat16 else 0)
    exact = tile.float().numpy()
    for row in range(40):
        values, columns = top_w(exact[row], np.arange(200))
        np.testing.assert_array_equal(lists[0][row], values)
        np.testing.assert_array_equal(lists[1][row], columns + 1000)
        assert lists[2][row] == values[-1]  # the threshold is the w-th best


def assert_best_of(listed_values, listed_ids, values, columns):
    """The list holds the WIDTH best values, each with a column that has that value; which of
    several equal values at the last place enters depends on the order scores arrive in."""
    expected, _ = top_w(values, columns)
    np.testing.assert_array_equal(listed_values, expected)
    value_of = dict(zip(columns.tolist(), values.tolist(), strict=True))
    assert len(set(listed_ids.tolist())) == WIDTH
    assert [value_of[i] for i in listed_ids.tolist()] == listed_values.tolist()


def test_scan_tile_merges_rows_and_columns_like_a_full_sort():
    rng = np.random.default_rng(2)
    left, right = rng.uniform(-1, 1, (30, 70)), rng.uniform(-1, 1, (30, 50))
    first = torch.from_numpy(left.astype(np.float32)).bfloat16()
    second = torch.from_numpy(right.astype(np.float32)).bfloat16()
    lists = empty_lists(60)  # list rows 0-29: tile rows; 30-59: tile columns
    start_lists(keys_of(first), 30, 70, 0, 100, *lists, K, BF16)
    start_lists(keys_of(second), 30, 50, 30, 200, *lists, K, BF16)
    cross = torch.from_numpy(rng.uniform(-1, 1, (30, 30)).astype(np.float32)).bfloat16()
    inserted = scan_tile(keys_of(cross), 30, 30, 0, 0, 30, 30, True, *lists, K, BF16)
    assert inserted > 0
    c = cross.float().numpy()
    for row in range(30):
        values = np.r_[first.float().numpy()[row], c[row]]
        columns = np.r_[np.arange(100, 170), np.arange(30, 60)]
        assert_best_of(lists[0][row], lists[1][row], values, columns)
        values = np.r_[second.float().numpy()[row], c[:, row]]
        columns = np.r_[np.arange(200, 250), np.arange(0, 30)]
        assert_best_of(lists[0][30 + row], lists[1][30 + row], values, columns)


def test_a_margin_raises_the_threshold_to_the_kth_minus_margin_and_admits_ties():
    scores = np.array([[0.9, 0.8, 0.7, 0.5] + [0.1] * 20], np.float32)
    lists = empty_lists(1, margin=0.25)
    start_lists(keys_of(torch.from_numpy(scores)), 1, 24, 0, 0, *lists, K, FP32)
    line = np.nextafter(np.float32(0.7) - np.float32(0.25), np.float32(-np.inf))
    assert lists[2][0] == line  # scores >= c_k - margin (0.45) are still admitted
    tie = np.array([[np.float32(0.7) - np.float32(0.25), 0.44]], np.float32)
    scan_tile(keys_of(torch.from_numpy(tie)), 1, 2, 0, 0, 0, 100, False, *lists, K, FP32)
    assert 100 in lists[1][0] and 101 not in lists[1][0]


def test_pair_scores_are_float64_sums_rounded_to_float32_and_symmetric():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((50, 37)).astype(np.float32)
    a, b = rng.integers(0, 50, 400), rng.integers(0, 50, 400)
    forward, backward = np.empty(400, np.float32), np.empty(400, np.float32)
    pair_scores_into(data, a, b, forward)
    pair_scores_into(data, b, a, backward)
    exact = (data[a].astype(np.float64) * data[b].astype(np.float64)).sum(axis=1)
    np.testing.assert_allclose(forward, exact.astype(np.float32), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(forward, backward)


def test_rescored_topk_orders_by_score_then_index_and_skips_unproven_rows():
    data = np.zeros((6, 4), np.float32)
    data[0] = [1, 0, 0, 0]
    data[1:5] = [0.5, 0, 0, 0]  # rows 1-4 tie with row 0 at 0.5
    data[5] = [0.9, 0, 0, 0]
    ids = np.array([[5, 4, 2, 1, 3], [0, 2, 3, 4, 5]], np.int64)  # candidate order: by score
    candidate = np.array([[0.9, 0.5, 0.5, 0.5, 0.5], [0.5] * 5], np.float32)
    out_ids, out_scores = np.full((2, 3), -7, np.int64), np.zeros((2, 3), np.float32)
    margins = np.full(2, 0.01, np.float32)
    rescored_topk(data, candidate, ids, margins, np.array([True, False]), 0, 3, out_ids, out_scores)
    np.testing.assert_array_equal(out_ids[0], [5, 1, 2])
    np.testing.assert_array_equal(out_scores[0], np.float32([0.9, 0.5, 0.5]))
    assert (out_ids[1] == -7).all()  # unproven: left for the fallback
