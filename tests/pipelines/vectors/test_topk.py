import numpy as np
import pytest
from sbert_pipeline.vectors.topk import neighbors_above, topk_neighbors


def brute_force(queries, corpus, k, excluded=None):
    """Sorted top-k by a float64 full score matrix; ties by lower index."""
    scores = queries.astype(np.float64) @ corpus.astype(np.float64).T
    if excluded is not None:
        scores[np.arange(len(queries)), excluded] = -np.inf
    order = np.lexsort((np.broadcast_to(np.arange(len(corpus)), scores.shape), -scores), axis=1)
    top = order[:, :k]
    return top, np.take_along_axis(scores, top, axis=1)


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((700, 24)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize(("block_size", "corpus_block_size"), [(4096, None), (256, 100), (97, 331)])
@pytest.mark.parametrize("exclude_self", [True, False])
def test_equals_brute_force(corpus, block_size, corpus_block_size, exclude_self):
    k = 15
    indices, scores = topk_neighbors(
        corpus,
        corpus,
        k,
        block_size=block_size,
        exclude_self=exclude_self,
        corpus_block_size=corpus_block_size,
    )
    expected, expected_scores = brute_force(
        corpus, corpus, k, np.arange(len(corpus)) if exclude_self else None
    )
    assert indices.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-6)
    assert (indices[:, 0] == np.arange(len(corpus))).all() != exclude_self


@pytest.mark.parametrize("exclude_self", [True, False])
def test_neighbors_above_equals_brute_force(corpus, exclude_self):
    threshold = 0.4
    found = neighbors_above(
        corpus,
        corpus,
        threshold,
        block_size=128,
        corpus_block_size=200,
        exclude_self=exclude_self,
    )
    full = corpus.astype(np.float64) @ corpus.astype(np.float64).T
    if exclude_self:
        np.fill_diagonal(full, -np.inf)
    assert len(found) == len(corpus)
    total = 0
    for row, (ids, scores) in enumerate(found):
        expected = np.flatnonzero(full[row] >= threshold)
        expected = expected[np.lexsort((expected, -full[row, expected]))]
        np.testing.assert_array_equal(ids, expected)
        np.testing.assert_allclose(scores, full[row, expected], atol=1e-6)
        total += len(ids)
    assert total > len(corpus) * (1 if exclude_self else 2)  # the threshold leaves some pairs


def test_separate_queries_and_positions(corpus):
    rng = np.random.default_rng(4)
    other = rng.standard_normal((50, 24)).astype(np.float32)
    indices, _ = topk_neighbors(other, corpus, 7, block_size=64, exclude_self=False)
    np.testing.assert_array_equal(indices, brute_force(other, corpus, 7)[0])

    rows = np.array([5, 699, 0, 321])
    indices, scores = topk_neighbors(corpus[rows], corpus, 9, block_size=128, query_positions=rows)
    expected, expected_scores = brute_force(corpus[rows], corpus, 9, rows)
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-6)


def test_self_is_excluded_by_position_not_by_value(corpus):
    data = np.concatenate([corpus[:20], corpus[:1]])  # row 20 duplicates row 0
    indices, scores = topk_neighbors(data, data, 1, block_size=8)
    assert indices[0, 0] == 20 and indices[20, 0] == 0
    assert scores[0, 0] == pytest.approx(1.0, abs=1e-6)


def test_k_may_reach_every_other_row(corpus):
    small = corpus[:30]
    indices, _ = topk_neighbors(small, small, 29, block_size=7)
    for row, neighbours in enumerate(indices):
        assert sorted(neighbours.tolist()) == [i for i in range(30) if i != row]


def test_bad_arguments(corpus):
    with pytest.raises(ValueError, match="k must be between 1 and 699"):
        topk_neighbors(corpus, corpus, 700)
    with pytest.raises(ValueError, match="k must be between 1 and 700"):
        topk_neighbors(corpus, corpus, 0, exclude_self=False)
    with pytest.raises(ValueError, match="same width"):
        topk_neighbors(corpus[:, :5], corpus, 3)
    with pytest.raises(ValueError, match="query_positions"):
        topk_neighbors(corpus[:3], corpus, 3, query_positions=np.array([0, 1, 700]))
    with pytest.raises(ValueError, match="block_size"):
        topk_neighbors(corpus, corpus, 3, block_size=0)
    with pytest.raises(ValueError, match="corpus_block_size"):
        neighbors_above(corpus, corpus, 0.5, corpus_block_size=0)
