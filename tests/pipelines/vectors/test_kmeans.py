import logging

import faiss
import numpy as np
import pytest
from planted import gaussian_mixture, unit_rows
from sbert_pipeline.vectors.kmeans import (
    CentroidSums,
    assign,
    centroid_sums,
    fit_spherical_kmeans,
    kmeans_plusplus,
    lloyd_pass,
    reseed_empty,
)
from sklearn.cluster import MiniBatchKMeans
from sklearn.metrics import adjusted_rand_score

MIXTURES = {"40 clusters": (8000, 40, 64, 1.0), "100 clusters": (12000, 100, 64, 1.2)}


@pytest.fixture(scope="module", params=list(MIXTURES))
def mixture(request):
    n, k, dim, noise = MIXTURES[request.param]
    vectors, labels = gaussian_mixture(n, k, dim, noise=noise, seed=0)
    return vectors, labels, k


@pytest.fixture(scope="module")
def fitted(mixture):
    vectors, _, k = mixture
    fit = fit_spherical_kmeans(vectors, k, seed=0)
    return fit, assign(vectors, fit.centroids)


def fp32_objective(vectors, centroids):
    """Sum of cosine distances to the nearest of ``centroids`` (normalised), exact fp32."""
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(unit_rows(centroids))
    scores, _ = index.search(vectors, 1)
    return float(np.sum(1.0 - scores.astype(np.float64)))


def test_recovers_planted_clusters_at_least_as_well_as_minibatch_kmeans(mixture, fitted):
    vectors, truth, k = mixture
    _, ours = fitted
    theirs = MiniBatchKMeans(k, random_state=0, n_init=1).fit(vectors).labels_
    ours_ari = adjusted_rand_score(truth, ours.labels)
    assert ours_ari >= adjusted_rand_score(truth, theirs)
    assert ours_ari > 0.9


def test_objective_within_one_percent_of_faiss(mixture, fitted):
    vectors, _, k = mixture
    _, ours = fitted
    plain = faiss.Kmeans(vectors.shape[1], k, niter=20, seed=0, spherical=True)
    plain.train(vectors)
    assert ours.objective <= 1.01 * fp32_objective(vectors, plain.centroids)
    assert ours.objective == pytest.approx(fp32_objective(vectors, fitted[0].centroids), rel=1e-5)


def test_fit_reports_itself(mixture, fitted):
    vectors, _, k = mixture
    fit, ours = fitted
    assert fit.centroids.shape == (k, vectors.shape[1]) and fit.centroids.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(fit.centroids, axis=1), 1.0, atol=1e-5)
    assert 1 <= fit.iterations <= 20 and len(fit.history) == fit.iterations
    assert fit.empty_clusters == 0 and np.bincount(ours.labels, minlength=k).min() > 0
    assert fit.objective == pytest.approx(ours.objective, rel=1e-6)
    assert fit.describe()["sample_size"] == len(vectors)


def test_deterministic_for_a_seed():
    vectors, _ = gaussian_mixture(4000, 20, 32, seed=3)
    first = fit_spherical_kmeans(vectors, 20, seed=0)
    again = fit_spherical_kmeans(vectors, 20, seed=0)
    np.testing.assert_array_equal(again.centroids, first.centroids)
    assert again.history == first.history
    other = fit_spherical_kmeans(vectors, 20, seed=1)
    assert not np.array_equal(other.centroids, first.centroids)


def float64_best(vectors, centroids):
    scores = vectors.astype(np.float64) @ centroids.astype(np.float64).T
    ordered = np.sort(scores, axis=1)
    return scores.argmax(axis=1), ordered[:, -1], ordered[:, -1] - ordered[:, -2]


@pytest.mark.parametrize("precision", ["auto", "bfloat16", "float32"])
def test_assignment_is_the_exact_nearest_centroid(precision):
    rng = np.random.default_rng(1)
    # Random directions: many rows have near-ties that bf16 alone would get wrong.
    vectors = unit_rows(rng.standard_normal((3000, 32)))
    centroids = unit_rows(rng.standard_normal((50, 32)))
    result = assign(vectors, centroids, precision=precision, block_size=1000)
    best, best_score, gap = float64_best(vectors, centroids)
    wrong = result.labels != best
    assert (gap[wrong] < 1e-6).all()  # only fp32-level ties may differ
    np.testing.assert_allclose(result.scores, best_score, atol=1e-6)
    assert result.labels.dtype == np.int64 and result.scores.dtype == np.float32


def test_assignment_of_nearly_identical_vectors():
    # All within cosine 0.9999 of each other: bf16 cannot tell the centroids apart, fp32 can.
    rng = np.random.default_rng(2)
    vectors = unit_rows(1 + 0.01 * rng.standard_normal((500, 16)))
    centroids = vectors[[3, 7, 11]]
    result = assign(vectors, centroids, precision="bfloat16")
    np.testing.assert_array_equal(result.labels, float64_best(vectors, centroids)[0])
    assert set(result.labels[[3, 7, 11]].tolist()) == {0, 1, 2}


def test_fast_assignment_matches_fp32(mixture, fitted):
    vectors, _, _ = mixture
    fit, ours = fitted
    reference = assign(vectors, fit.centroids, precision="float32")
    assert (ours.labels == reference.labels).mean() > 0.9999
    np.testing.assert_allclose(ours.scores, reference.scores, atol=1e-6)


def test_partial_sums_merge_into_a_full_lloyd_pass(mixture, fitted):
    vectors, _, _ = mixture
    centroids = fitted[0].centroids
    whole = centroid_sums(vectors, centroids)
    parts = [centroid_sums(part, centroids) for part in np.array_split(vectors, 3)]
    merged = parts[0].merge(parts[1]).merge(parts[2])
    np.testing.assert_array_equal(merged.counts, whole.counts)
    np.testing.assert_allclose(merged.sums, whole.sums, atol=1e-3)
    assert merged.objective == pytest.approx(whole.objective, rel=1e-9)
    streamed = lloyd_pass(iter(np.array_split(vectors, 5)), centroids)
    np.testing.assert_allclose(
        streamed.centroids(centroids)[0], whole.centroids(centroids)[0], atol=1e-5
    )
    # Lloyd never makes the objective worse.
    assert fp32_objective(vectors, whole.centroids(centroids)[0]) <= whole.objective + 1e-3


def test_centroids_keep_the_previous_one_when_empty():
    previous = unit_rows(np.eye(3, 4))
    sums = CentroidSums.zeros(3, 4).merge(
        CentroidSums(np.array([[2.0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 3, 0]]), np.array([2, 0, 1]))
    )
    centroids, empty = sums.centroids(previous)
    assert empty.tolist() == [False, True, False]
    np.testing.assert_array_equal(centroids[1], previous[1])
    np.testing.assert_allclose(centroids[2], [0, 0, 1, 0])


def test_reseed_moves_the_farthest_vectors_of_clusters_that_can_spare_them():
    labels = np.array([0, 0, 0, 1, 2, 2])
    scores = np.array([0.9, 0.2, 0.95, 0.1, 0.5, 0.6], np.float32)
    counts = np.bincount(labels, minlength=5)
    moved = reseed_empty(labels, scores, counts, np.array([3, 4]))
    # Row 3 (score 0.1) is the only member of cluster 1, so rows 1 and 4 move.
    assert moved == 2
    assert labels.tolist() == [0, 3, 0, 1, 4, 2]
    assert counts.tolist() == [2, 1, 1, 1, 1]


def test_duplicates_leave_clusters_empty_and_say_so(caplog):
    distinct = unit_rows(np.random.default_rng(2).standard_normal((25, 16)))
    vectors = np.repeat(distinct, 8, axis=0)
    with caplog.at_level(logging.WARNING, logger="sbert_pipeline.vectors.kmeans"):
        fit = fit_spherical_kmeans(vectors, 30, seed=0)
    assert fit.empty_clusters == 5 and fit.reseeded == 0  # nothing distinct left to move
    assert "5 of 30 clusters empty" in caplog.text
    labels = assign(vectors, fit.centroids).labels
    assert len(np.unique(labels)) == 25


def test_kmeans_plusplus_spreads_seeds_over_planted_clusters():
    vectors, labels = gaussian_mixture(2000, 20, 64, noise=0.3, seed=5)
    seeds = kmeans_plusplus(vectors, 20, np.random.default_rng(0))
    assert len(set(labels[seeds].tolist())) == 20


def test_bad_arguments():
    vectors = unit_rows(np.random.default_rng(0).standard_normal((10, 4)))
    for k in (0, 11):
        with pytest.raises(ValueError, match="k must be between 1 and the number of vectors"):
            fit_spherical_kmeans(vectors, k)
    with pytest.raises(ValueError, match="zero vectors"):
        fit_spherical_kmeans(vectors[:0], 1)
    with pytest.raises(ValueError, match="precision"):
        assign(vectors, vectors[:2], precision="float16")
