"""The dedup maths (union-find, groups, policies, sweep, histogram), the id lists and the report."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pyarrow as pa
import pytest
from dedup_reference import UnionFind
from sbert_pipeline.dedup.report import GroupView, Member, report_page
from sbert_pipeline.dedup.summary import similarity_histogram
from sbert_pipeline.dedup.versions import decode_id, encode_id, read_id_list, write_id_list
from sbert_pipeline.grouping.methods import components_by_keep
from sbert_pipeline.grouping.model import CHAINED
from sbert_pipeline.grouping.pairs import IndexedPairs, index_pairs
from sbert_pipeline.grouping.ranking import corpus_ranks, derived_id_ranks, id_ranks
from sbert_pipeline.grouping.sweep import SweepPoint, sweep_thresholds, threshold_sweep

from sbert_core.graph import smallest_node_labels


def _pairs(edges: list[tuple[int, int, float]]) -> IndexedPairs:
    a, b, s = zip(*edges, strict=True) if edges else ((), (), ())
    return IndexedPairs(np.array(a, np.int64), np.array(b, np.int64), np.array(s, np.float32))


def _partition(labels: np.ndarray) -> set[frozenset[int]]:
    """Components of size >= 2 as sets of rows."""
    groups: dict[int, set[int]] = {}
    for row, label in enumerate(labels.tolist()):
        groups.setdefault(label, set()).add(row)
    return {frozenset(rows) for rows in groups.values() if len(rows) > 1}


def _brute_components(n: int, edges: list[tuple[int, int]]) -> set[frozenset[int]]:
    """Components by repeated breadth-first search: the reference answer."""
    neighbours: dict[int, set[int]] = {i: set() for i in range(n)}
    for a, b in edges:
        neighbours[a].add(b)
        neighbours[b].add(a)
    seen: set[int] = set()
    out = set()
    for start in range(n):
        if start in seen:
            continue
        frontier, component = [start], {start}
        while frontier:
            node = frontier.pop()
            for other in neighbours[node] - component:
                component.add(other)
                frontier.append(other)
        seen |= component
        if len(component) > 1:
            out.add(frozenset(component))
    return out


def test_union_find_merges_and_reports_whether_it_did():
    sets = UnionFind(6)
    assert sets.union(0, 1)
    assert sets.union(2, 3)
    assert not sets.union(1, 0)
    assert sets.union(1, 3)
    assert not sets.union(0, 2)
    roots = sets.roots()
    assert len(set(roots[[0, 1, 2, 3]].tolist())) == 1
    assert roots[4] == 4 and roots[5] == 5
    assert sets.size[sets.find(0)] == 4


def test_union_by_size_keeps_a_chain_flat():
    sets = UnionFind(10_000)
    for i in range(9_999):
        sets.union(i + 1, i)  # each new singleton hangs under the big set's root
    root = sets.find(0)
    assert all(sets.parent[i] == root for i in range(10_000))


def test_find_compresses_the_path():
    sets = UnionFind(6)
    sets.parent = [0, 0, 1, 2, 3, 4]  # a chain 5 -> 4 -> 3 -> 2 -> 1 -> 0
    assert sets.find(5) == 0
    assert sets.parent == [0] * 6


def test_connected_components_on_hand_made_pairs():
    pairs = _pairs([(0, 1, 0.9), (1, 2, 0.9), (4, 5, 0.95), (7, 8, 0.99), (5, 7, 0.91)])
    assert _partition(smallest_node_labels(10, pairs.a, pairs.b)) == {
        frozenset({0, 1, 2}),
        frozenset({4, 5, 7, 8}),
    }


def test_index_pairs_orients_and_keeps_each_pair_once_with_its_best_score():
    ids = ["b", "a", "c", "d"]
    pairs = index_pairs(ids, ["a", "b", "c", "d"], ["b", "a", "a", "c"], [0.8, 0.9, 0.7, 0.6])
    found = {
        (int(a), int(b)): float(s) for a, b, s in zip(pairs.a, pairs.b, pairs.scores, strict=True)
    }
    assert found == pytest.approx({(0, 1): 0.9, (1, 2): 0.7, (2, 3): 0.6})
    assert np.all(pairs.a < pairs.b)


def test_index_pairs_accepts_any_arrow_string_type():
    ids = pa.array(["a", "b", "c"], pa.large_string())
    pairs = index_pairs(ids, pa.array(["c", "a"]).dictionary_encode(), ["b", "b"], [0.9, 0.8])
    assert (pairs.a.tolist(), pairs.b.tolist()) == ([0, 1], [1, 2])


def test_index_pairs_refuses_unknown_ids_and_self_pairs():
    with pytest.raises(ValueError, match=r"not among the 2 embedded ids.*'zz'"):
        index_pairs(["a", "b"], ["a"], ["zz"], [0.9])
    with pytest.raises(ValueError, match="with itself"):
        index_pairs(["a", "b"], ["a"], ["a"], [0.9])


def test_first_keeps_the_lowest_rank_and_groups_are_numbered_by_size():
    pairs = _pairs([(0, 1, 0.95), (1, 2, 0.92), (3, 4, 0.99), (5, 6, 0.5)])
    rank = np.array([6, 5, 4, 3, 2, 1, 0])  # reversed: the last row comes first
    groups = components_by_keep(7, pairs, 0.9, "first", order_rank=rank)
    assert groups.group.tolist() == [0, 0, 0, 1, 1, -1, -1]
    assert np.flatnonzero(groups.representative).tolist() == [2, 4]
    assert groups.sizes.tolist() == [3, 2]
    assert groups.n_removed == 3 and int(groups.kept.sum()) == 4
    assert groups.pairs_used == 3
    assert groups.members(0, rank).tolist() == [2, 1, 0]


def test_equal_sizes_are_numbered_by_their_first_member():
    pairs = _pairs([(0, 1, 0.95), (2, 3, 0.95)])
    groups = components_by_keep(4, pairs, 0.9, order_rank=np.array([3, 2, 1, 0]))
    assert groups.group.tolist() == [1, 1, 0, 0]


def test_longest_keeps_the_longest_text_ties_to_first():
    pairs = _pairs([(0, 1, 0.95), (1, 2, 0.95), (3, 4, 0.95)])
    lengths = np.array([5, 9, 9, 4, 4])
    groups = components_by_keep(
        5, pairs, 0.9, "longest", text_lengths=lengths, order_rank=np.arange(5)
    )
    assert np.flatnonzero(groups.representative).tolist() == [1, 3]
    groups = components_by_keep(
        5, pairs, 0.9, "longest", text_lengths=lengths, order_rank=-np.arange(5)
    )
    assert np.flatnonzero(groups.representative).tolist() == [2, 4]


def test_longest_needs_every_grouped_text():
    pairs = _pairs([(0, 1, 0.95)])
    with pytest.raises(ValueError, match="1 of 2 are unknown"):
        components_by_keep(3, pairs, 0.9, "longest", text_lengths=np.array([3, -1, -1]))
    with pytest.raises(ValueError, match="unknown keep policy"):
        components_by_keep(3, pairs, 0.9, "shortest")  # type: ignore[arg-type]


def test_central_keeps_the_hub_of_a_chain():
    # 0 - 1 - 2 - 3 with 1-2 strongest: 1 and 2 each have two pairs, 1's sum is higher.
    pairs = _pairs([(0, 1, 0.93), (1, 2, 0.97), (2, 3, 0.91), (0, 3, 0.5)])
    groups = components_by_keep(4, pairs, 0.9, "central")
    assert np.flatnonzero(groups.representative).tolist() == [1]
    # A member with one strong pair does not beat one with two good ones (missing pairs
    # count as 0 in the mean over the other members).
    pairs = _pairs([(0, 1, 0.99), (1, 2, 0.92)])
    assert np.flatnonzero(components_by_keep(3, pairs, 0.9, "central").representative).tolist() == [
        1
    ]
    # Exact ties go to the first.
    pairs = _pairs([(0, 1, 0.95)])
    groups = components_by_keep(2, pairs, 0.9, "central", order_rank=np.array([1, 0]))
    assert np.flatnonzero(groups.representative).tolist() == [1]


def test_threshold_is_compared_in_float32():
    pairs = _pairs([(0, 1, np.float32(0.9))])  # a hair under 0.9 in float64
    assert components_by_keep(2, pairs, 0.9).n_groups == 1
    assert threshold_sweep(2, pairs, [0.9])[0].groups == 1


def test_no_pairs_means_no_groups_and_everything_kept():
    groups = components_by_keep(5, IndexedPairs.empty(), 0.9, "central")
    assert groups.n_groups == 0 and groups.n_removed == 0 and bool(groups.kept.all())
    assert groups.largest == 0
    assert threshold_sweep(5, IndexedPairs.empty(), [0.8]) == [SweepPoint(0.8, 0, 0, 0, 0, 5, 0)]


def test_sweep_equals_a_brute_force_recount_at_every_threshold():
    rng = np.random.default_rng(3)
    n = 300
    a = rng.integers(0, n, 900)
    b = rng.integers(0, n, 900)
    keep = a != b
    # Scores on a 0.005 grid, so many pairs sit exactly on the thresholds.
    scores = np.round(rng.uniform(0.75, 1.0, keep.sum()) / 0.005) * 0.005
    pairs = index_pairs(
        [str(i) for i in range(n)],
        [str(i) for i in a[keep]],
        [str(i) for i in b[keep]],
        scores,
    )
    thresholds = sweep_thresholds(0.8, 0.99, 0.01, 0.905)
    sweep = threshold_sweep(n, pairs, thresholds)
    assert [point.threshold for point in sweep] == thresholds
    for point in sweep:
        used = pairs.scores >= np.float32(point.threshold)
        edges = list(zip(pairs.a[used].tolist(), pairs.b[used].tolist(), strict=True))
        components = _brute_components(n, edges)
        grouped = sum(len(c) for c in components)
        assert point.pairs == int(used.sum())
        assert point.groups == len(components)
        assert point.removed == grouped - len(components)
        assert point.kept + point.removed == n
        assert point.largest == max((len(c) for c in components), default=0)
        groups = components_by_keep(n, pairs, point.threshold)
        assert groups.n_removed == point.removed and groups.n_groups == point.groups
        assert _partition(np.where(groups.group >= 0, groups.group, -1 - np.arange(n))) == (
            components
        )


def test_sweep_answers_in_the_order_asked():
    pairs = _pairs([(0, 1, 0.95), (1, 2, 0.85)])
    sweep = threshold_sweep(3, pairs, [0.9, 0.8, 0.99])
    assert [(p.threshold, p.removed) for p in sweep] == [(0.9, 1), (0.8, 2), (0.99, 0)]


def test_sweep_thresholds_grid():
    values = sweep_thresholds(0.8, 0.99, 0.01, 0.955)
    assert len(values) == 21 and values[0] == 0.8 and values[-1] == 0.99
    assert 0.9 in values and 0.955 in values
    assert sweep_thresholds(0.8, 0.8, 0.01, 0.8) == [0.8]
    with pytest.raises(ValueError, match="in \\[-1, 1\\]"):
        sweep_thresholds(0.8, 1.5, 0.01)
    with pytest.raises(ValueError, match="step > 0"):
        sweep_thresholds(0.9, 0.8, 0.01)


def test_similarity_histogram_bins():
    scores = np.array([0.8, 0.805, 0.81, 0.9, np.float32(0.9), 0.999, 1.0, 1.0000001], np.float32)
    histogram = similarity_histogram(scores, 0.8)
    assert len(histogram.counts) == 20 and histogram.edges[0] == 0.8 and histogram.edges[-1] == 1.0
    assert histogram.counts.sum() == len(scores)
    assert histogram.counts[0] == 2 and histogram.counts[1] == 1
    assert histogram.counts[10] == 2  # 0.9 in float32 is in the 0.90 bin, as the threshold is
    assert histogram.counts[-1] == 3  # 0.999, 1 and a rounding hair above 1
    with pytest.raises(ValueError, match="below the histogram's low end"):
        similarity_histogram(np.array([0.5], np.float32), 0.8)


def test_representative_scores():
    pairs = _pairs([(0, 1, 0.95), (1, 2, 0.91), (0, 2, 0.5)])
    groups = components_by_keep(4, pairs, 0.9, "first")
    scores = groups.matched_score
    assert np.isnan(scores[0]) and scores[1] == pytest.approx(0.95)
    assert np.isnan(scores[2])  # its pair with the representative is under the threshold
    assert np.isnan(scores[3])
    assert groups.matched.tolist() == [-1, 0, 0, -1]
    assert groups.reasons()[1:3] == ["similar to its representative", CHAINED]


def test_order_ranks():
    ids = ["b.txt:10", "a.txt:2", "b.txt:9", "a.txt:10"]
    assert derived_id_ranks(ids).tolist() == [3, 0, 2, 1]
    assert derived_id_ranks(["x", "a.txt:1"]) is None
    assert id_ranks(["b", "a", "é", "B"]).tolist() == [2, 1, 3, 0]
    assert corpus_ranks(np.array([[1, 5], [0, 9], [1, 2]])).tolist() == [2, 0, 1]


WEIRD_IDS = ["plain", "with\nnewline", "back\\slash", "cr\r", "\\n literal", "", "é 🙂", "a\tb"]


def test_id_encoding_round_trips():
    for value in WEIRD_IDS:
        line = encode_id(value)
        assert "\n" not in line and "\r" not in line
        assert decode_id(line) == value
    assert encode_id("plain") == "plain"
    with pytest.raises(ValueError, match="bad escape"):
        decode_id("a\\tb")


def test_id_lists_round_trip(tmp_path):
    path = str(tmp_path / "ids.txt")
    assert write_id_list(path, WEIRD_IDS) == len(WEIRD_IDS)
    assert read_id_list(path) == WEIRD_IDS
    assert (tmp_path / "ids.txt").read_bytes().count(b"\n") == len(WEIRD_IDS)
    write_id_list(path, [])
    assert read_id_list(path) == []


def test_report_shows_the_numbers_and_escapes_texts():
    pairs = _pairs([(0, 1, 0.95), (1, 2, 0.91), (3, 4, 0.97)])
    sweep = threshold_sweep(6, pairs, [0.9, 0.93, 0.96])
    histogram = similarity_histogram(pairs.scores, 0.9)
    views = [
        GroupView(
            0,
            3,
            [
                Member("id<0>", "<script>alert('x')</script> kept text", True, None),
                Member("id1", "a & b", False, 0.95),
                Member("id2", None, False, None),
            ],
        )
    ]
    page = report_page(
        {"rows in": 6, "removed": 3, "label <b>": "value & more"},
        histogram,
        0.93,
        sweep,
        views,
        total_groups=2,
        notes=["pairs <limited>"],
    )
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; kept text" in page
    assert "id&lt;0&gt;" in page and "a &amp; b" in page and "label &lt;b&gt;" in page
    assert "pairs &lt;limited&gt;" in page
    assert "0.950" in page  # the removed member's similarity to the kept one
    assert "The 1 largest of 2 groups" in page
    # The sweep table: threshold 0.93 removes 2 rows (pairs 0.95 and 0.97), highlighted.
    chosen = re.search(r'<tr class="chosen">(.*?)</tr>', page).group(1)
    assert re.findall(r">([^<]+)</td>", chosen) == ["0.93", "2", "2", "2", "4", "2"]
    assert "threshold 0.93" in page  # the marker in the plots
    assert page.count("<svg") == 2
    for external in ("src=", "href=", "@import", "url("):
        assert external not in page


def test_report_without_groups():
    page = report_page(
        {"rows in": 3},
        similarity_histogram(np.zeros(0, np.float32), 0.8),
        0.9,
        threshold_sweep(3, IndexedPairs.empty(), [0.8, 0.9]),
        [],
        total_groups=0,
    )
    assert "No duplicate groups at this threshold." in page


@pytest.mark.parametrize("policy", ["first", "longest", "central"])
def test_policies_pick_exactly_one_member_per_group(policy):
    rng = np.random.default_rng(1)
    n = 200
    edges = [
        (int(a), int(b), float(s))
        for a, b, s in zip(
            rng.integers(0, n, 300), rng.integers(0, n, 300), rng.random(300), strict=True
        )
        if a != b
    ]
    ids = [f"i{i}" for i in range(n)]
    a, b, s = zip(*edges, strict=True)
    pairs = index_pairs(ids, [ids[i] for i in a], [ids[i] for i in b], s)
    groups = components_by_keep(n, pairs, 0.5, policy, text_lengths=rng.integers(1, 50, n))
    for g in range(groups.n_groups):
        members = np.flatnonzero(groups.group == g)
        assert groups.representative[members].sum() == 1
        assert len(members) == groups.sizes[g]
    assert not groups.representative[groups.group < 0].any()
    assert int(groups.kept.sum()) + groups.n_removed == n
    assert all(x >= y for x, y in itertools.pairwise(groups.sizes.tolist()))
