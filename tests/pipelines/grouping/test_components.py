"""scipy's components and the numba sweep give what the pure-Python union-find gave."""

from __future__ import annotations

import numpy as np
import pytest
from dedup_reference import (
    connected_components as reference_components,
)
from dedup_reference import (
    duplicate_pair_components,
    smallest_member,
)
from dedup_reference import (
    threshold_sweep as reference_sweep,
)
from sbert_pipeline.grouping.pairs import IndexedPairs, pair_components
from sbert_pipeline.grouping.sweep import merge_counts, threshold_sweep

from sbert_core.graph import component_labels
from sbert_core.training.duplicate_pairs import smallest_node_labels


def _random_pairs(seed: int, n: int, p: int) -> IndexedPairs:
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, p), rng.integers(0, n, p)
    keep = a != b
    a, b = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    _, first = np.unique(a * n + b, return_index=True)
    # Coarse scores, so that many pairs tie and sit exactly on a threshold.
    scores = np.round(rng.uniform(0.5, 1.0, len(first)), 2).astype(np.float32)
    return IndexedPairs(a[first], b[first], scores)


@pytest.mark.parametrize(("seed", "n", "p"), [(0, 1, 0), (1, 5, 0), (2, 30, 20), (3, 200, 150)])
def test_smallest_node_labels_match_the_union_find(seed, n, p):
    pairs = _random_pairs(seed, n, p)
    expected = smallest_member(reference_components(n, pairs))
    assert pair_components(n, pairs).tolist() == expected.tolist()


def test_component_labels_are_numbered_by_smallest_row():
    labels = component_labels(7, np.array([5, 1, 6]), np.array([3, 4, 3]))
    assert labels.tolist() == [0, 1, 2, 3, 1, 3, 3]
    assert component_labels(0, np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []


@pytest.mark.parametrize(("seed", "n", "p"), [(0, 1, 0), (4, 40, 60), (5, 300, 500)])
def test_sweep_matches_the_union_find(seed, n, p):
    pairs = _random_pairs(seed, n, p)
    # Unsorted, repeated, on-score and out-of-range thresholds.
    thresholds = [0.9, 0.5, 0.75, 0.9, 1.0, 0.62, 0.99, 0.4, 1.5]
    assert threshold_sweep(n, pairs, thresholds) == reference_sweep(n, pairs, thresholds)


def test_merge_counts_refuses_stops_past_the_edges():
    with pytest.raises(ValueError, match="stops"):
        merge_counts(3, np.array([0]), np.array([1]), np.array([2]))


def test_duplicate_pair_components_match_the_union_find():
    rng = np.random.default_rng(6)
    a, b = rng.integers(0, 80, 60), rng.integers(0, 80, 60)
    # One edge 300 times and self loops: a repeated edge stays one edge.
    a = np.concatenate([a, np.full(300, 3), [7, 7]])
    b = np.concatenate([b, np.full(300, 9), [7, 7]])
    assert smallest_node_labels(80, a, b).tolist() == duplicate_pair_components(80, a, b).tolist()
    assert smallest_node_labels(0, np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []
