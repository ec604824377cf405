import faiss
import numpy as np
import pyarrow as pa
import pytest
from planted import unit_rows
from sbert_pipeline.vectors.exact_truth import ExactTopK, recall_at_k


def test_both_kernels_give_the_exact_answer_where_there_are_no_ties():
    vectors = unit_rows(np.random.default_rng(0).standard_normal((700, 16)).astype(np.float32))
    queries = vectors[[5, 300, 650]]
    expected = faiss.knn(queries, vectors, 8, metric=faiss.METRIC_INNER_PRODUCT)[1]
    for kernel in ("torch", "faiss"):
        truth = ExactTopK(queries, 8, kernel=kernel, offset=100)
        for start in range(0, len(vectors), 256):
            truth.add(vectors[start : start + 256])
        np.testing.assert_array_equal(truth.result()[1], expected + 100)


def test_the_faiss_kernel_ranks_l2_distances_nearest_first():
    vectors = np.arange(10, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)
    truth = ExactTopK(vectors[[3]] + 0.1, 3, metric="l2", kernel="faiss")
    truth.add(vectors[:4])
    truth.add(vectors[4:])
    distances, positions = truth.result()
    assert positions.tolist() == [[3, 4, 2]]
    assert distances[0, 0] == pytest.approx(0.02, abs=1e-6)


def test_the_torch_kernel_leaves_out_the_query_and_keeps_ids_and_vectors():
    vectors = unit_rows(np.random.default_rng(1).standard_normal((40, 8)).astype(np.float32))
    vectors[30] = vectors[7]  # an exact duplicate of the query is a neighbour; the query is not
    truth = ExactTopK(vectors[[7]], 3, exclude_rows=np.array([7]), keep_vectors=True)
    truth.add(vectors[:20], [f"r{i}" for i in range(20)])
    truth.add(vectors[20:], pa.array([f"r{i}" for i in range(20, 40)]))
    assert truth.neighbor_ids()[0][0] == "r30" and "r7" not in truth.neighbor_ids()[0]
    positions = truth.result()[1][0]
    np.testing.assert_array_equal(truth.neighbor_vectors()[0], vectors[positions])


def test_options_a_kernel_does_not_have_are_refused():
    queries = np.zeros((1, 4), np.float32)
    with pytest.raises(ValueError, match="positions only"):
        ExactTopK(queries, 2, kernel="faiss", exclude_rows=np.array([0]))
    with pytest.raises(ValueError, match="inner product"):
        ExactTopK(queries, 2, metric="l2")
    with pytest.raises(ValueError, match="kernel must be"):
        ExactTopK(queries, 2, kernel="numpy")
    plain = ExactTopK(queries, 2)
    plain.add(np.ones((5, 4), np.float32))
    with pytest.raises(ValueError, match="ids of every batch"):
        plain.neighbor_ids()
    with pytest.raises(ValueError, match="keep_vectors"):
        plain.neighbor_vectors()
    with pytest.raises(ValueError, match="more than k"):
        ExactTopK(queries, 2).neighbor_vectors()


def test_recall_counts_each_item_once_and_at_most_the_items_to_find():
    # Positions: the second found 3 and the -1 slots count for nothing.
    assert recall_at_k(np.array([[3, 3, -1]]), np.array([[1, 3, 5]]), 3) == pytest.approx(1 / 3)
    # Ties: two found items tie with the k-th exact score, but one query has only 2 to find.
    found, scores = [["x", "y"]], [[0.8, 0.8]]
    ties = {"found_scores": scores, "true_scores": np.array([[0.9, 0.8]])}
    assert recall_at_k(found, [["a", "b"]], 2, **ties) == 1.0
    assert recall_at_k(found, [["a", "b"]], 2) == 0.0
    assert recall_at_k([], [], 10) == 1.0
