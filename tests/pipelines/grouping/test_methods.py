"""Dedup methods (components, ranked, star, mutual, average) against brute-force references."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sbert_pipeline.grouping.choices import METHODS
from sbert_pipeline.grouping.linkage import average_linkage
from sbert_pipeline.grouping.methods import components_by_keep, group_items, sweep_groupings
from sbert_pipeline.grouping.model import NEAR_REPRESENTATIVE, REASONS, THROUGH_MEMBERS
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.ranking import rank_items

from tests.planted import unit_rows

FLOOR = 0.5


def _planted(seed: int, n_groups: int = 12, dim: int = 16) -> tuple[int, IndexedPairs, dict]:
    """Tight groups, groups pairwise close (so components chain), a planted chain, background.

    Returns the item count, every pair at or above FLOOR, and the dense scores as a dict.
    """
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((n_groups, dim)))
    # Every other group sits near the previous one: components over loose thresholds merge them.
    for g in range(1, n_groups, 2):
        centres[g] = unit_rows(centres[g - 1] + 0.6 * unit_rows(rng.standard_normal((1, dim))))[0]
    rows = []
    for centre in centres:
        size = int(rng.integers(2, 7))
        rows.append(centre + 0.25 * rng.standard_normal((size, dim)) / np.sqrt(dim))
    # A chain: each step moves a little, so neighbours are close and the ends are far apart.
    step = unit_rows(rng.standard_normal((1, dim)))[0]
    start = unit_rows(rng.standard_normal((1, dim)))[0]
    rows.append(np.stack([start + 0.35 * i * step for i in range(8)]))
    rows.append(rng.standard_normal((10, dim)))
    vectors = unit_rows(np.concatenate(rows))
    n = len(vectors)
    scores = (vectors @ vectors.T).astype(np.float32)
    a, b = np.triu_indices(n, 1)
    keep = scores[a, b] >= FLOOR
    pairs = IndexedPairs(a[keep].astype(np.int64), b[keep].astype(np.int64), scores[a, b][keep])
    dense = {
        (int(x), int(y)): float(s) for x, y, s in zip(pairs.a, pairs.b, pairs.scores, strict=True)
    }
    return n, pairs, dense


def _score(dense: dict, x: int, y: int) -> float | None:
    return dense.get((min(x, y), max(x, y)))


def _bfs_partition(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Label per item: the smallest item of its connected component (breadth-first search)."""
    neighbours = {i: set() for i in range(n)}
    for x, y in edges:
        neighbours[x].add(y)
        neighbours[y].add(x)
    label = [-1] * n
    for start in range(n):
        if label[start] >= 0:
            continue
        queue, label[start] = [start], start
        while queue:
            node = queue.pop()
            for other in neighbours[node]:
                if label[other] < 0:
                    label[other] = start
                    queue.append(other)
    return label


def _groups_of(labels) -> set[frozenset[int]]:
    found: dict[int, set[int]] = {}
    for row, label in enumerate(labels):
        found.setdefault(int(label), set()).add(row)
    return {frozenset(members) for members in found.values() if len(members) > 1}


def _best_ranked(members, rank) -> int:
    return min(members, key=lambda row: rank[row])


def _brute_components(n, dense, threshold):
    edges = [pair for pair, s in dense.items() if s >= np.float32(threshold)]
    return _groups_of(_bfs_partition(n, edges))


def _brute_ranked(n, dense, threshold, rank, allowed=lambda x, y: True):
    """Visit by rank; join the most similar kept better-ranked item (ties: its better rank)."""
    leader = {}
    kept = []
    for item in sorted(range(n), key=lambda row: rank[row]):
        candidates = []
        for other in kept:
            s = _score(dense, item, other)
            if s is not None and s >= np.float32(threshold) and allowed(item, other):
                candidates.append((-s, rank[other], other))
        if candidates:
            leader[item] = min(candidates)[2]
        else:
            kept.append(item)
    labels = [leader.get(row, row) for row in range(n)]
    return _groups_of(labels), leader


def _brute_mutual(n, dense, threshold, k):
    lists = {}
    for item in range(n):
        others = [(_score(dense, item, o), o) for o in range(n) if o != item]
        others = [(s, o) for s, o in others if s is not None]
        others.sort(key=lambda pair: (-pair[0], pair[1]))
        lists[item] = [o for _, o in others[:k]]
    edges = [
        (x, y)
        for (x, y), s in dense.items()
        if s >= np.float32(threshold) and y in lists[x] and x in lists[y]
    ]
    return _groups_of(_bfs_partition(n, edges))


def _brute_average(n, dense, threshold, missing):
    """Naive agglomeration: merge the two clusters with the highest mean while it is >= T."""
    clusters = [{i} for i in range(n)]
    limit = float(np.float32(threshold))
    while True:
        best = None
        for i, j in itertools.combinations(range(len(clusters)), 2):
            given = [_score(dense, x, y) for x in clusters[i] for y in clusters[j]]
            known = [s for s in given if s is not None]
            if not known:
                continue
            mean = (sum(known) + missing * (len(given) - len(known))) / len(given)
            if mean >= limit and (best is None or mean > best[0]):
                best = (mean, i, j)
        if best is None:
            break
        _, i, j = best
        clusters[i] |= clusters.pop(j)
    return {frozenset(c) for c in clusters if len(c) > 1}


def _check_representatives(grouping, rank):
    """One representative per group, the best-ranked member (for label-based methods)."""
    for g in range(grouping.n_groups):
        members = np.flatnonzero(grouping.group == g)
        reps = members[grouping.representative[members]]
        assert len(reps) == 1
        assert reps[0] == _best_ranked(members.tolist(), rank)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("threshold", [0.75, 0.85, 0.93])
def test_components_and_ranked_match_brute_force(seed, threshold):
    n, pairs, dense = _planted(seed)
    rank = rank_items("random", n, seed=seed)
    comp = group_items("components", n, pairs, threshold, rank)
    assert _groups_of(comp.labels()) == _brute_components(n, dense, threshold)
    _check_representatives(comp, rank)

    ranked = group_items("ranked", n, pairs, threshold, rank)
    expected, leader = _brute_ranked(n, dense, threshold, rank)
    assert _groups_of(ranked.labels()) == expected
    assert {int(i): int(ranked.matched[i]) for i in np.flatnonzero(ranked.removed)} == leader
    # A ranked group is a star: every removed member is >= T to its representative.
    assert np.all(ranked.matched_score[ranked.removed] >= np.float32(threshold))
    assert set(ranked.reason[ranked.removed].tolist()) <= {NEAR_REPRESENTATIVE}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("threshold", "radius"), [(0.8, 0.7), (0.85, 0.85), (0.9, 0.6)])
def test_star_is_ranked_inside_components(seed, threshold, radius):
    n, pairs, dense = _planted(seed)
    rank = rank_items("central", n, pairs=pairs, threshold=threshold)
    star = group_items("star", n, pairs, threshold, rank, rep_threshold=radius)
    component = {}
    for label, members in enumerate(_brute_components(n, dense, threshold)):
        for row in members:
            component[row] = label
    expected, leader = _brute_ranked(
        n,
        dense,
        radius,
        rank,
        allowed=lambda x, y: x in component and component.get(y) == component[x],
    )
    assert _groups_of(star.labels()) == expected
    assert {int(i): int(star.matched[i]) for i in np.flatnonzero(star.removed)} == leader
    assert np.all(star.matched_score[star.removed] >= np.float32(radius))
    # Stars never reach outside a component at the threshold.
    comp = group_items("components", n, pairs, threshold, rank).labels()
    for g in range(star.n_groups):
        assert len(set(comp[star.group == g].tolist())) == 1


def _brute_split(n, dense, threshold, rank, radius):
    """Recursively: a component failing the radius test is split at the next level up."""
    found = []

    def visit(members: set[int], level: float) -> None:
        edges = [
            (x, y)
            for (x, y), s in dense.items()
            if x in members and y in members and s >= np.float32(level)
        ]
        labels = _bfs_partition(n, edges)
        parts: dict[int, set[int]] = {}
        for row in members:
            parts.setdefault(labels[row], set()).add(row)
        for part in parts.values():
            rep = _best_ranked(part, rank)
            near = all(
                row == rep or (_score(dense, row, rep) or -2.0) >= np.float32(radius)
                for row in part
            )
            if near:
                found.append(frozenset(part))
            else:
                visit(part, round(level + 0.01, 6))

    visit(set(range(n)), threshold)
    return {part for part in found if len(part) > 1}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("threshold", "radius"), [(0.75, 0.6), (0.8, 0.75), (0.85, 0.85)])
def test_split_matches_recursive_reference(seed, threshold, radius):
    n, pairs, dense = _planted(seed)
    rank = rank_items("central", n, pairs=pairs, threshold=threshold)
    split = group_items("split", n, pairs, threshold, rank, rep_threshold=radius)
    assert _groups_of(split.labels()) == _brute_split(n, dense, threshold, rank, radius)
    _check_representatives(split, rank)
    assert np.all(split.matched_score[split.removed] >= np.float32(radius))
    # Splitting only refines the components at the threshold.
    comp = group_items("components", n, pairs, threshold, rank).labels()
    for g in range(split.n_groups):
        assert len(set(comp[split.group == g].tolist())) == 1


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_mutual_neighbours_match_brute_force(seed, k):
    n, pairs, dense = _planted(seed)
    rank = rank_items("first", n)
    mutual = group_items("mutual", n, pairs, 0.8, rank, k=k)
    assert _groups_of(mutual.labels()) == _brute_mutual(n, dense, 0.8, k)
    _check_representatives(mutual, rank)
    if k == 1:  # each item has one nearest neighbour: mutual pairs form a matching
        assert mutual.largest <= 2


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("threshold", "missing"), [(0.8, 0.0), (0.7, 0.5), (0.9, 0.0)])
def test_average_linkage_matches_naive_agglomeration(seed, threshold, missing):
    n, pairs, dense = _planted(seed, n_groups=8)
    rank = rank_items("first", n)
    average = group_items("average", n, pairs, threshold, rank, missing_score=missing)
    assert _groups_of(average.labels()) == _brute_average(n, dense, threshold, missing)
    _check_representatives(average, rank)


def test_average_dendrogram_cuts_equal_direct_runs():
    n, pairs, _ = _planted(3)
    rank = rank_items("first", n)
    tree = average_linkage(n, pairs, 0.6)
    assert np.all(np.diff(tree.height) <= 1e-12)  # merge heights never increase
    for threshold in (0.6, 0.75, 0.9):
        direct = group_items("average", n, pairs, threshold, rank)
        cut = tree.cut(threshold, rank, pairs)
        assert np.array_equal(direct.labels(), cut.labels())
    with pytest.raises(ValueError, match=r"built down to 0\.6"):
        tree.cut(0.55, rank, pairs)


def test_components_equal_todays_deduplicate():
    """components with a rank is today's union-find grouping with that representative rule."""
    n, pairs, _ = _planted(4)
    order = np.random.default_rng(4).permutation(n)
    lengths = np.random.default_rng(5).integers(5, 50, n)
    for policy in ("first", "longest", "central"):
        today = components_by_keep(n, pairs, 0.8, policy, order_rank=order, text_lengths=lengths)
        rank = rank_items(
            policy, n, order_rank=order, text_lengths=lengths, pairs=pairs, threshold=0.8
        )
        new = group_items("components", n, pairs, 0.8, rank)
        assert _groups_of(new.labels()) == _groups_of(
            np.where(today.group >= 0, today.group, n + np.arange(n))
        )
        assert np.array_equal(new.representative, today.representative)
        assert new.n_removed == today.n_removed and new.largest == today.largest


def test_chain_is_one_component_but_split_by_chain_free_methods():
    """Five items in a line: neighbours 0.9, two apart 0.8, further apart below the floor."""
    a, b, s = [], [], []
    for x in range(5):
        for y in range(x + 1, 5):
            score = {1: 0.9, 2: 0.8}.get(y - x)
            if score:
                a.append(x), b.append(y), s.append(score)
    pairs = IndexedPairs(np.array(a), np.array(b), np.array(s, np.float32))
    rank = rank_items("first", 5)
    assert group_items("components", 5, pairs, 0.85, rank).largest == 5
    ranked = group_items("ranked", 5, pairs, 0.85, rank)
    # 0 kept, 1 joins 0; 2 is kept (its better neighbour 1 was removed), 3 joins 2; 4 kept.
    assert ranked.group.tolist() == [0, 0, 1, 1, -1]
    assert ranked.representative.tolist() == [True, False, True, False, False]
    star = group_items("star", 5, pairs, 0.85, rank, rep_threshold=0.8)
    # Radius 0.8 around 0 takes 1 and 2; then 3 is kept and takes 4.
    assert star.group.tolist() == [0, 0, 0, 1, 1]
    assert star.reason.tolist() == [0, NEAR_REPRESENTATIVE, NEAR_REPRESENTATIVE, 0, 1]
    # split: 4 is not within 0.8 of 0; at 0.86 and above the 0.9 links still chain all five,
    # at 0.91 nothing is linked: five singletons.
    split = group_items("split", 5, pairs, 0.85, rank, rep_threshold=0.8)
    assert split.largest == 0
    # Average linkage: {0,1} and {2,3} at 0.9; then {0,1}+{2,3} has mean (0.8+0.9+0.8+0)/4.
    assert group_items("average", 5, pairs, 0.85, rank).largest <= 3
    components = group_items("components", 5, pairs, 0.85, rank)
    assert REASONS[components.reason[4]] == REASONS[THROUGH_MEMBERS]  # 4 is far from 0


def test_counts_hold_for_every_method():
    n, pairs, _ = _planted(5)
    rank = rank_items("central", n, pairs=pairs, threshold=0.8)
    for method in METHODS:
        grouping = group_items(method, n, pairs, 0.8, rank, rep_threshold=0.75)
        assert int(grouping.kept.sum()) + grouping.n_removed == n
        assert grouping.sizes.sum() == np.sum(grouping.group >= 0)
        assert list(grouping.sizes) == sorted(grouping.sizes, reverse=True)
        assert np.all(grouping.matched[grouping.kept] == -1)
        assert np.all(grouping.group[grouping.matched[grouping.removed]] >= 0)
        matched_group = grouping.group[grouping.matched[grouping.removed]]
        assert np.array_equal(matched_group, grouping.group[grouping.removed])


def test_sweep_equals_single_calls():
    n, pairs, _ = _planted(6)
    thresholds = [0.7, 0.8, 0.9]

    def rank_at(t):
        return rank_items("central", n, pairs=pairs, threshold=t)

    for method in METHODS:
        swept = list(
            sweep_groupings(method, n, pairs, thresholds, rank_at, rep_threshold=lambda t: t - 0.05)
        )
        for threshold, grouping in zip(thresholds, swept, strict=True):
            single = group_items(
                method, n, pairs, threshold, rank_at(threshold), rep_threshold=threshold - 0.05
            )
            assert np.array_equal(grouping.labels(), single.labels()), method
            assert np.array_equal(grouping.representative, single.representative), method


def test_rank_policies():
    pairs = IndexedPairs(np.array([0, 0, 1]), np.array([1, 2, 2]), np.array([0.9, 0.8, 0.95]))
    order = np.array([3, 2, 1, 0])  # corpus order: row 3 first
    assert rank_items("first", 4, order_rank=order).tolist() == [3, 2, 1, 0]
    lengths = np.array([5, 9, 9, -1])  # ties go to corpus order; unknown length: no pair
    longest = rank_items("longest", 4, order_rank=order, text_lengths=lengths, pairs=pairs)
    assert longest.tolist() == [2, 1, 0, 3]
    # central: row 2 has 0.8 + 0.95, row 1 has 0.9 + 0.95, row 0 has 0.9 + 0.8.
    assert rank_items("central", 4, pairs=pairs, threshold=0.5).tolist() == [2, 0, 1, 3]
    values = np.array([1.0, 3.0, 2.0, np.nan])
    assert rank_items("column", 4, values=values, pairs=pairs).tolist() == [2, 0, 1, 3]
    ascending = rank_items("column", 4, values=values, descending=False, pairs=pairs)
    assert ascending.tolist() == [0, 2, 1, 3]
    with pytest.raises(ValueError, match="1 of 4 are missing"):
        rank_items("column", 4, values=values)  # without pairs every item needs a value
    random = rank_items("random", 4, seed=7)
    assert sorted(random.tolist()) == [0, 1, 2, 3]
    assert np.array_equal(random, rank_items("random", 4, seed=7))


def test_bad_inputs_get_clear_errors():
    pairs = IndexedPairs(np.array([0]), np.array([1]), np.array([0.9], np.float32))
    rank = np.arange(3)
    with pytest.raises(ValueError, match="unknown dedup method"):
        group_items("louvain", 3, pairs, 0.8, rank)
    with pytest.raises(ValueError, match="unknown ranking"):
        rank_items("shortest", 3)
    with pytest.raises(ValueError, match="permutation"):
        group_items("components", 3, pairs, 0.8, np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="threshold"):
        group_items("ranked", 3, pairs, 1.5, rank)
    with pytest.raises(ValueError, match="rep_threshold"):
        group_items("star", 3, pairs, 0.8, rank, rep_threshold=0.9)
    with pytest.raises(ValueError, match="k must be"):
        group_items("mutual", 3, pairs, 0.8, rank, k=0)
    with pytest.raises(ValueError, match="missing_score"):
        group_items("average", 3, pairs, 0.8, rank, missing_score=0.85)
    with pytest.raises(ValueError, match="1 of 2 are missing"):
        rank_items("longest", 3, text_lengths=np.array([4, -1, -1]), pairs=pairs)
    with pytest.raises(ValueError, match="rows a < b"):
        reversed_pair = IndexedPairs(np.array([1]), np.array([0]), pairs.scores)
        group_items("components", 2, reversed_pair, 0.8, np.arange(2))
