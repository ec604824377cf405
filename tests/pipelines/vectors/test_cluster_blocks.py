from itertools import pairwise

import numpy as np
import pyarrow as pa
import pytest
from planted import gaussian_mixture, unit_rows
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from sbert_pipeline.pairs.merge import merge_neighbors, merge_pairs
from sbert_pipeline.pairs.output_tables import neighbors_table, pairs_table
from sbert_pipeline.vectors.block_plan import (
    ProbeTuning,
    choose_nprobe,
    default_clusters,
    group_blocks,
    nearest_centroids,
    plan_blocks,
    shared_probe_recall,
)
from sbert_pipeline.vectors.block_search import search_block
from sbert_pipeline.vectors.exact_truth import ExactTopK, recall_at_k
from sbert_pipeline.vectors.kmeans import fit_spherical_kmeans


def exact_scores(vectors: np.ndarray) -> np.ndarray:
    """All inner products, float64-accumulated and rounded to float32; -inf on the diagonal."""
    scores = (vectors.astype(np.float64) @ vectors.T.astype(np.float64)).astype(np.float32)
    np.fill_diagonal(scores, -np.inf)
    return scores


def pairs_set(a, b) -> set[tuple[int, int]]:
    return set(zip(np.asarray(a).tolist(), np.asarray(b).tolist(), strict=True))


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    data, _ = gaussian_mixture(400, 8, 16, noise=0.6, seed=3)
    data[50] = data[60] = data[70] = data[40]  # exact duplicates: ties at the top of lists
    return data


def test_search_block_is_the_brute_force_answer(vectors):
    scores = exact_scores(vectors)
    result = search_block(vectors, 7, threshold=0.8)
    truth = -np.sort(-scores, axis=1)[:, :7]
    np.testing.assert_array_equal(result.scores, truth)
    np.testing.assert_array_equal(np.take_along_axis(scores, result.indices, axis=1), result.scores)
    # The duplicates rank each other first, smaller positions first.
    assert result.indices[40, :3].tolist() == [50, 60, 70]
    assert result.indices[70, :3].tolist() == [40, 50, 60]
    a, b = np.nonzero(np.triu(scores >= np.float32(0.8), 1))
    assert pairs_set(result.pair_a, result.pair_b) == pairs_set(a, b)
    np.testing.assert_array_equal(result.pair_scores, scores[result.pair_a, result.pair_b])
    assert np.all(np.diff(result.pair_a) >= 0)


@pytest.mark.parametrize(("k", "threshold"), [(3, 0.3), (12, 0.5), (2, -1.0)])
def test_pairs_beyond_the_lists_are_found_by_a_threshold_search(vectors, k, threshold):
    # At a low threshold most rows have more than k neighbours above it.
    scores = exact_scores(vectors)
    result = search_block(vectors, k, threshold=threshold)
    a, b = np.nonzero(np.triu(scores >= np.float32(threshold), 1))
    assert len(a) > len(vectors) * k / 2
    assert pairs_set(result.pair_a, result.pair_b) == pairs_set(a, b)
    np.testing.assert_array_equal(result.pair_scores, scores[result.pair_a, result.pair_b])


def test_query_ranges_partition_the_work(vectors):
    whole = search_block(vectors, 5, threshold=0.5)
    parts = [search_block(vectors, 5, threshold=0.5, rows=(lo, lo + 90)) for lo in (0, 90, 180)]
    parts.append(search_block(vectors, 5, threshold=0.5, rows=(270, 400)))
    np.testing.assert_array_equal(np.concatenate([p.indices for p in parts]), whole.indices)
    np.testing.assert_array_equal(np.concatenate([p.pair_a for p in parts]), whole.pair_a)
    np.testing.assert_array_equal(np.concatenate([p.pair_b for p in parts]), whole.pair_b)


def test_small_blocks_give_short_lists():
    lone = search_block(unit_rows(np.ones((1, 4))), 5, threshold=0.0)
    assert lone.indices.shape == (1, 0) and len(lone.pair_a) == 0
    three = unit_rows(np.array([[1.0, 0], [0.8, 0.6], [0, 1.0]]))
    result = search_block(three, 5, threshold=0.5)
    assert result.indices.tolist() == [[1, 2], [0, 2], [1, 0]]
    assert pairs_set(result.pair_a, result.pair_b) == {(0, 1), (1, 2)}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k must be at least 1"),
        ({"k": 2, "threshold": 1.5}, r"\[-1, 1\]"),
        ({"k": 2, "rows": (5, 3)}, "rows must satisfy"),
    ],
)
def test_search_block_refuses_bad_arguments(vectors, kwargs, message):
    with pytest.raises(ValueError, match=message):
        search_block(vectors, **kwargs)


def test_nearest_centroids_are_the_most_similar(vectors):
    centroids = vectors[:30]
    probes = nearest_centroids(vectors, centroids, 3)
    expected = np.argsort(-(vectors @ centroids.T), axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(np.sort(probes, axis=1), np.sort(expected, axis=1))
    with pytest.raises(ValueError, match="nprobe"):
        nearest_centroids(vectors, centroids, 31)


def test_merge_neighbors_is_order_free_and_keeps_the_best_k():
    ids = pa.array(["a", "b", "c", "d", "e"])
    first = neighbors_table(
        ids, np.array([0, 1]), np.array([[1, 2], [0, 3]]), np.array([[0.9, 0.5], [0.9, 0.4]])
    )
    # "a" again from another block: "c" with the same score, "d" and "e" tied below "b".
    second = neighbors_table(
        ids, np.array([0, 4]), np.array([[2, 4], [0, 1]]), np.array([[0.5, 0.7], [0.1, 0.1]])
    )
    third = neighbors_table(ids, np.array([0]), np.array([[3]]), np.array([[0.7]]))
    lonely = neighbors_table(ids, np.array([2]), np.zeros((1, 0), np.int64), np.zeros((1, 0)))
    expected = {
        "a": (["b", "d", "e"], [0.9, 0.7, 0.7]),
        "b": (["a", "d"], [0.9, 0.4]),
        "c": ([], []),
        "e": (["a", "b"], [0.1, 0.1]),
    }
    tables = [first, second, third, lonely]
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2]):
        merged = merge_neighbors([tables[i] for i in order], 3)
        assert merged.schema.equals(NEIGHBORS_SCHEMA)
        rows = {r["id"]: (r["neighbor_ids"], r["scores"]) for r in merged.to_pylist()}
        assert merged.column("id").to_pylist() == sorted(expected)
        assert {i: (n, pytest.approx(s)) for i, (n, s) in rows.items()} == expected
    assert merge_neighbors([NEIGHBORS_SCHEMA.empty_table()], 3).num_rows == 0


def test_merge_pairs_keeps_each_pair_once():
    ids = pa.array(["a", "b", "c"])
    one = pairs_table(ids, np.array([0, 1]), np.array([1, 2]), np.array([0.9, 0.8]))
    two = pairs_table(ids, np.array([0, 0]), np.array([2, 1]), np.array([0.7, 0.9]))
    merged = merge_pairs([two, one])
    assert merged.schema.equals(PAIRS_SCHEMA)
    assert [tuple(r.values()) for r in merged.to_pylist()] == [
        ("a", "b", pytest.approx(0.9)),
        ("a", "c", pytest.approx(0.7)),
        ("b", "c", pytest.approx(0.8)),
    ]


def test_plan_blocks_splits_a_cluster_too_large_for_one_worker():
    # One tight region holds half of the data: k-means gives it one centroid, and its block
    # would be far over the cap.
    big, _ = gaussian_mixture(800, 1, 16, noise=0.1, seed=1)
    rest, _ = gaussian_mixture(800, 10, 16, noise=0.3, seed=2)
    sample = np.concatenate([big, rest])
    unsplit = plan_blocks(sample, 32_000, 11, nprobe=1, max_block=1_000_000, seed=0)
    plan = plan_blocks(sample, 32_000, 11, nprobe=1, max_block=4_000, seed=0)
    assert unsplit.split == 0 and unsplit.estimated_sizes.max() >= 15_000
    assert plan.split >= 1 and len(plan.centroids) > 11
    assert plan.estimated_sizes.sum() == pytest.approx(32_000, rel=0.01)
    assert plan.estimated_sizes.max() < unsplit.estimated_sizes.max() / 2
    described = plan.describe()
    assert described["clusters_fitted"] == 11 and described["blocks_planned"] == len(plan.centroids)
    assert plan.nprobe == 1 and plan.choice.predicted_recall is None
    with pytest.raises(ValueError, match="fixed nprobe or tuning"):
        plan_blocks(sample, 32_000, 11, max_block=4_000)


def test_sample_truth_streams_the_exact_answer(vectors):
    scores = exact_scores(vectors)
    rows = np.array([3, 40, 50, 399])
    truth = ExactTopK(vectors[rows], 6, exclude_rows=rows, keep_vectors=True)
    ids = [f"id{i}" for i in range(len(vectors))]
    for start in range(0, len(vectors), 64):
        truth.add(vectors[start : start + 64], pa.array(ids[start : start + 64]))
    true_ids, (true_scores, _) = truth.neighbor_ids(), truth.result()
    np.testing.assert_allclose(true_scores, -np.sort(-scores[rows], axis=1)[:, :6], atol=1e-6)
    assert true_ids[1][:3] == ["id50", "id60", "id70"]  # duplicates count, the query does not
    assert "id40" not in true_ids[1]
    positions = [[int(i[2:]) for i in row] for row in true_ids]
    np.testing.assert_array_equal(truth.neighbor_vectors(), vectors[positions])


def test_recall_counts_ties_as_hits():
    true_ids = [["a", "b"], ["c", "d"]]
    true_scores = np.array([[0.9, 0.8], [0.7, 0.6]], np.float32)
    found_ids = [["a", "x"], ["y", "z"]]
    found_scores = [[0.9, 0.8], [0.6, 0.5]]  # "x" ties with "b"; "y" ties with "d"
    ties = {"found_scores": found_scores, "true_scores": true_scores}
    assert recall_at_k(found_ids, true_ids, 2, **ties) == pytest.approx(0.75)
    ties = {"found_scores": [[0.9], []], "true_scores": true_scores}
    assert recall_at_k([["a"], []], true_ids, 2, **ties) == pytest.approx(0.25)


def test_default_clusters():
    assert default_clusters(1_000_000, 10) == 2000
    assert default_clusters(2000, 10) == 50
    assert default_clusters(300, 10) == 7
    assert default_clusters(20, 10) == 1


@pytest.fixture(scope="module")
def blocked():
    """Vectors, their exact top-5, and k-means centroids that cut them into 12 blocks."""
    data, _ = gaussian_mixture(1500, 6, 16, noise=1.2, seed=7)
    top = search_block(data, 5).indices
    return data, top, fit_spherical_kmeans(data, 12, seed=0).centroids


def test_predicted_recall_is_the_recall_of_the_merged_blocks(blocked):
    data, top, centroids = blocked
    ids = pa.array([f"r{i:04d}" for i in range(len(data))])
    probes = nearest_centroids(data, centroids, 4)
    queries = np.arange(0, len(data), 7)
    for nprobe in (1, 2, 4):
        tables = []
        for block in range(len(centroids)):
            members = np.flatnonzero((probes[:, :nprobe] == block).any(axis=1))
            found = search_block(data[members], 5)
            tables.append(neighbors_table(ids, members, members[found.indices], found.scores))
        merged = merge_neighbors(tables, 5).to_pylist()
        hits = sum(
            len({f"r{j:04d}" for j in top[q]} & set(merged[q]["neighbor_ids"])) for q in queries
        )
        predicted = shared_probe_recall(probes[queries], probes[top[queries]], nprobe)
        assert predicted == pytest.approx(hits / (5 * len(queries)))
    assert shared_probe_recall(probes[queries], probes[top[queries]], 1) < 0.9


def test_choose_nprobe_stops_at_the_target_or_the_work_cap(blocked):
    data, top, centroids = blocked
    tuning = ProbeTuning(data[::5], data[top[::5]], 0.9)
    # Twelve blocks of 1,500 vectors: each probe costs ~8% of the exact work.
    choice = choose_nprobe(centroids, data, len(data), tuning, max_work=1.0)
    probes = nearest_centroids(data, centroids, 12)
    recalls = [shared_probe_recall(probes[::5], probes[top[::5]], p) for p in range(1, 13)]
    first = next(p for p, r in enumerate(recalls, 1) if r >= 0.9)
    assert choice.nprobe == first and choice.reached and choice.predicted_recall >= 0.9
    assert [p for p, _, _ in choice.curve] == list(range(1, first + 1))
    assert all(b[2] > a[2] for a, b in pairwise(choice.curve))  # more probes, more work
    capped = choose_nprobe(centroids, data, len(data), tuning, max_work=choice.curve[0][2] * 1.01)
    assert capped.nprobe == 1 and capped.reached is False
    fixed = plan_blocks(data, len(data), 12, max_block=10_000, nprobe=3, tuning=tuning, seed=0)
    assert fixed.nprobe == 3 and fixed.choice.predicted_recall is not None
    assert fixed.describe()["nprobe_choice"]["curve"][0]["nprobe"] == 3


def test_group_blocks_packs_blocks_into_bounded_groups():
    sizes = np.array([50, 10, 40, 30, 30, 20, 5, 15])
    groups = group_blocks(sizes, capacity=70)
    loads = np.bincount(groups, weights=sizes)
    assert len(loads) == 3 and loads.max() - loads.min() <= sizes.max()
    assert group_blocks(sizes, capacity=70).tolist() == groups.tolist()  # deterministic
    assert len(np.unique(group_blocks(sizes, capacity=10_000, min_groups=4))) == 4
    assert len(np.unique(group_blocks(sizes, capacity=1, min_groups=4))) == len(sizes)
    assert group_blocks(np.zeros(0, np.int64), capacity=5).shape == (0,)
