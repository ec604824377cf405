"""Threshold means threshold, and no group over the size limit: a chain of pairs (a ~ b ~ c ~
..., each link above T, the ends far apart) and a large planted cluster."""

from __future__ import annotations

import numpy as np
import pytest
from sbert_pipeline.grouping.choices import DEFAULT_MAX_GROUP_SIZE, METHODS, holds_threshold
from sbert_pipeline.grouping.compare import MethodSettings, Ranker, group_at
from sbert_pipeline.grouping.limit import limit_group_size
from sbert_pipeline.grouping.methods import group_items
from sbert_pipeline.grouping.pairs import IndexedPairs, lookup_scores
from sbert_pipeline.grouping.ranking import rank_items
from sbert_pipeline.grouping.sizes import removed_below, size_distribution


def chain(n: int, link: float = 0.92, skip: float = 0.80) -> IndexedPairs:
    """Rows 0 .. n-1 in a line: neighbours ``link``, rows two apart ``skip`` (under T = 0.85),
    rows further apart no pair (far apart)."""
    a = [i for i in range(n - 1)] + [i for i in range(n - 2)]
    b = [i + 1 for i in range(n - 1)] + [i + 2 for i in range(n - 2)]
    s = [link] * (n - 1) + [skip] * (n - 2)
    return IndexedPairs(np.array(a, np.int64), np.array(b, np.int64), np.array(s, np.float32))


def planted(size: int, noise: int, seed: int = 0) -> tuple[int, IndexedPairs]:
    """A cluster of ``size`` rows, every pair in [0.86, 0.99], and ``noise`` rows chained to it."""
    rng = np.random.default_rng(seed)
    a, b = np.triu_indices(size, 1)
    scores = rng.uniform(0.86, 0.99, len(a)).astype(np.float32)
    tail = np.arange(size, size + noise)
    a = np.concatenate([a, tail - 1])
    b = np.concatenate([b, tail])
    scores = np.concatenate([scores, np.full(noise, 0.9, np.float32)])
    return size + noise, IndexedPairs(a.astype(np.int64), b.astype(np.int64), scores)


def removed_scores_to_kept(grouping, pairs) -> np.ndarray:
    """Every removed row's score to the kept row of its group, looked up in the pairs."""
    rows = np.flatnonzero(grouping.removed)
    heads = grouping.representatives()[grouping.group[rows]]
    return lookup_scores(pairs, grouping.n, rows, heads)


def default_grouping(n: int, pairs: IndexedPairs, threshold: float, **settings):
    """The grouping ``sbert dedup --threshold T`` makes with its defaults (and ``settings``)."""
    chosen = MethodSettings(**settings)
    return group_at(chosen.method, chosen, pairs, threshold, Ranker(chosen, n, pairs, np.arange(n)))


@pytest.mark.parametrize("threshold", [0.85, 0.9])
def test_the_default_never_removes_a_row_below_the_threshold_to_its_kept_row(threshold):
    n, pairs = 12, chain(12)
    grouping = default_grouping(n, pairs, threshold)
    assert grouping.n_removed > 0
    assert np.all(removed_scores_to_kept(grouping, pairs) >= np.float32(threshold))
    assert removed_below(grouping, threshold) == 0
    assert grouping.group[0] < 0 or grouping.group[0] != grouping.group[n - 1]
    assert holds_threshold("star", MethodSettings().radius_at(threshold), threshold)


def test_components_chain_the_ends_together_and_are_counted_below_the_threshold():
    n, pairs = 12, chain(12)
    grouping = default_grouping(n, pairs, 0.85, method="components")
    assert grouping.n_groups == 1 and grouping.group[0] == grouping.group[n - 1]
    assert removed_below(grouping, 0.85) == n - 3  # all but the kept row and its 2 links
    assert not holds_threshold("components", None, 0.85)
    assert not holds_threshold("star", 0.75, 0.85)  # a radius under T is the looser rule


@pytest.mark.parametrize("method", METHODS)
def test_the_group_size_limit_holds_for_every_method(method):
    n, pairs = planted(60, 40)
    limit = 10
    rank = rank_items("central", n, pairs=pairs, threshold=0.85)
    grouping = group_items(method, n, pairs, 0.85, rank, max_group_size=limit)
    assert grouping.largest <= limit
    assert grouping.split_groups >= 1
    assert grouping.n_removed > 0
    # The split groups' members are >= T to their kept row, whatever the method.
    if holds_threshold(method, 0.85 if method in ("star", "split") else None, 0.85):
        assert removed_below(grouping, 0.85) == 0


def test_a_large_planted_cluster_is_split_into_stars_at_or_above_the_threshold():
    n, pairs = planted(60, 0)
    rank = rank_items("central", n, pairs=pairs, threshold=0.85)
    whole = group_items("components", n, pairs, 0.85, rank)
    assert whole.largest == 60
    split = limit_group_size(whole, pairs, rank, 10)
    assert split.largest <= 10 and split.split_groups == 1
    assert np.all(removed_scores_to_kept(split, pairs) >= np.float32(0.85))
    assert split.n_removed + int(split.kept.sum()) == n
    assert sum(size_distribution(split.sizes).values()) == split.n_groups


def test_groups_within_the_limit_are_left_as_they_are():
    n, pairs = planted(8, 5)
    rank = rank_items("first", n, pairs=pairs, threshold=0.85, order_rank=np.arange(n))
    grouping = group_items("components", n, pairs, 0.85, rank)
    assert limit_group_size(grouping, pairs, rank, 13) is grouping
    assert limit_group_size(grouping, pairs, rank, None) is grouping
    mixed = IndexedPairs(
        np.concatenate([pairs.a, [100, 101]]),
        np.concatenate([pairs.b, [101, 102]]),
        np.concatenate([pairs.scores, np.float32([0.9, 0.9])]),
    )
    rank = rank_items("first", 103, pairs=mixed, threshold=0.85, order_rank=np.arange(103))
    before = group_items("components", 103, mixed, 0.85, rank)
    after = limit_group_size(before, mixed, rank, 5)
    small = before.group == before.group[100]
    # The chain of 3 keeps its kept row, its members and its chained member's missing score.
    assert np.array_equal(after.representative[small], before.representative[small])
    assert np.isnan(after.matched_score[102]) and after.group[102] == after.group[100]
    with pytest.raises(ValueError, match="at least 2"):
        limit_group_size(before, mixed, rank, 1)


def test_size_distribution_bins():
    sizes = np.array([2, 2, 3, 5, 6, 20, 21, 100, 101, 5000])
    assert size_distribution(sizes) == {"2": 2, "3-5": 2, "6-20": 2, "21-100": 2, ">100": 2}
    assert DEFAULT_MAX_GROUP_SIZE <= 1000
