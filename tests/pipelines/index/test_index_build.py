import faiss
import numpy as np
import pytest
from planted_vectors import clustered_vectors, exact_top_k, recall
from sbert_pipeline.index.build import (
    ArraySource,
    BuildSettings,
    build_index,
    gather_rows,
    index_order,
    sample_positions,
    skip_rows,
)
from sbert_pipeline.vectors.exact_truth import ExactTopK, recall_at_k

# Reached at nprobe 5 on this data: doubling tries 1, 2, 4, 8, then bisection tries 6 and 5.
TARGET = 0.98


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    return clustered_vectors(12_000, 32, clusters=60, spread=1.0)


@pytest.fixture(scope="module")
def fresh_queries() -> np.ndarray:
    return clustered_vectors(2_000, 32, clusters=60, spread=1.0, draw=1)


@pytest.fixture(scope="module")
def ivf(corpus):
    return build_index(ArraySource(corpus), BuildSettings("IVF64,Flat", target_recall=TARGET))


def test_recall_at_k_counts_overlap_and_ignores_padding():
    truth = np.array([[1, 2, 3], [4, 5, -1]])
    found = np.array([[3, 9, 1], [5, -1, -1]])
    # row 0: {1, 3} of {1, 2, 3}; row 1: {5} of {4, 5} -> 3 hits of 5
    assert recall_at_k(found, truth, k=3) == pytest.approx(3 / 5)
    assert recall_at_k(np.full((1, 3), -1), np.full((1, 3), -1), k=3) == 1.0


def test_exact_neighbours_streamed_and_merged_match_brute_force(corpus):
    queries = corpus[:50]
    expected = exact_top_k(corpus, queries, 10)
    streamed = ExactTopK(queries, 10, metric="ip", kernel="faiss")
    for start in range(0, len(corpus), 1000):
        streamed.add(corpus[start : start + 1000])
    assert np.array_equal(streamed.result()[1], expected)
    halves = []
    for lo, hi in ((0, 5000), (5000, len(corpus))):
        part = ExactTopK(queries, 10, metric="ip", offset=lo, kernel="faiss")
        part.add(corpus[lo:hi])
        halves.append(part.result())
    assert np.array_equal(ExactTopK.merge(halves, 10, "ip")[1], expected)


def test_sampling_skipping_and_index_order_agree():
    train, held_out = sample_positions(1000, 300, 50, seed=3)
    assert len(train) == 300 and len(held_out) == 50
    assert not set(train) & set(held_out) and np.all(np.diff(held_out) > 0)
    # Held out is capped at a tenth of the corpus.
    assert len(sample_positions(100, 10, 1000, seed=0)[1]) == 10

    vectors = np.arange(1000, dtype=np.float32).reshape(-1, 1)
    assert np.array_equal(gather_rows(ArraySource(vectors), held_out, 64)[:, 0], held_out)
    kept = np.concatenate(
        list(skip_rows((vectors[i : i + 64] for i in range(0, 1000, 64)), held_out))
    )
    order = index_order(1000, held_out)
    assert np.array_equal(np.concatenate([kept[:, 0], held_out]), order)
    assert sorted(order.tolist()) == list(range(1000))


def test_ivf_tuning_picks_the_smallest_nprobe_reaching_the_target(ivf, corpus, fresh_queries):
    tuning = ivf.tuning
    assert tuning.parameter == "nprobe" and tuning.reached
    tried = dict(tuning.tried)
    assert tried[tuning.value] == tuning.recall >= TARGET
    assert tried[tuning.value - 1] < TARGET
    assert ivf.index.ntotal == len(corpus)
    assert faiss.extract_index_ivf(ivf.index).nprobe == tuning.value
    # An independent check on fresh queries agrees with the held-out estimate.
    _, found = ivf.index.search(fresh_queries, 10)
    measured = recall(ivf.corpus_rows(found), exact_top_k(corpus, fresh_queries, 10))
    assert abs(measured - tuning.recall) <= 0.01


def test_held_out_rows_are_indexed_last(ivf, corpus):
    rows = ivf.corpus_rows(np.arange(len(corpus)))
    assert sorted(rows.tolist()) == list(range(len(corpus)))
    assert np.array_equal(rows[-len(ivf.held_out) :], ivf.held_out)
    # A held-out row, searched for, finds itself: at its new position at the end.
    _, self_hits = ivf.index.search(corpus[ivf.held_out[:20]], 1)
    assert np.array_equal(ivf.corpus_rows(self_hits[:, 0]), ivf.held_out[:20])


def test_sq8_keeps_the_recall_that_pq_codes_cap(corpus):
    """IVF,SQ8 (a byte per component) reaches the target where PQ's codes plateau below it:
    the reason the planner tries SQ8 before product quantization."""
    source = ArraySource(corpus[:6000])
    sq8 = build_index(source, BuildSettings("IVF32,SQ8", target_recall=0.95, n_queries=300))
    assert sq8.tuning.parameter == "nprobe" and sq8.tuning.reached
    assert sq8.tuning.recall >= 0.95
    pq = build_index(source, BuildSettings("IVF32,PQ4", target_recall=0.95, n_queries=300))
    assert not pq.tuning.reached and max(dict(pq.tuning.tried).values()) < 0.95


def test_hnsw_and_flat(corpus):
    source = ArraySource(corpus[:3000])
    hnsw = build_index(source, BuildSettings("HNSW16", target_recall=0.97, n_queries=300))
    assert hnsw.tuning.parameter == "efSearch" and hnsw.tuning.recall >= 0.97
    assert hnsw.index.hnsw.efSearch == hnsw.tuning.value
    flat = build_index(source, BuildSettings("Flat", n_queries=300))
    assert flat.tuning.search_params == {} and flat.tuning.recall == 1.0


def test_metrics_cosine_and_squared_l2(corpus):
    raw = corpus[:2000] * np.linspace(0.5, 3.0, 2000, dtype=np.float32)[:, None]
    queries = raw[:5]
    cosine = build_index(ArraySource(raw), BuildSettings("Flat", metric="ip"))
    scores, positions = cosine.index.search(queries / np.linalg.norm(queries, axis=1)[:, None], 3)
    assert np.allclose(scores[:, 0], 1.0, atol=1e-5)  # every query finds itself at cosine 1
    assert np.array_equal(cosine.corpus_rows(positions[:, 0]), np.arange(5))

    euclid = build_index(ArraySource(raw), BuildSettings("Flat", metric="l2"))
    distances, positions = euclid.index.search(queries, 2)
    rows = euclid.corpus_rows(positions[:, 1])
    expected = ((raw[rows] - queries) ** 2).sum(axis=1)
    assert np.allclose(distances[:, 1], expected, rtol=1e-4)


def test_bad_factory_and_too_small_training_sample(corpus):
    with pytest.raises(ValueError, match="FAISS cannot build the index 'IVFxx,Flat'"):
        build_index(ArraySource(corpus[:100]), BuildSettings("IVFxx,Flat"))
    with pytest.raises(ValueError, match="needs at least 64 training vectors"):
        build_index(ArraySource(corpus[:1000]), BuildSettings("IVF64,Flat", train_sample=10))


def test_gpu_path_trains_and_adds_on_the_gpu_copy(monkeypatch, corpus):
    """The GPU branch, with FAISS's CPU<->GPU copies replaced by clones (no GPU here)."""
    moved = []

    def to_gpu(resources, device, index):
        moved.append(("to", device))
        return faiss.clone_index(index)

    def to_cpu(index):
        moved.append(("back", None))
        return faiss.clone_index(index)

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "StandardGpuResources", object, raising=False)
    monkeypatch.setattr(faiss, "index_cpu_to_gpu", to_gpu, raising=False)
    monkeypatch.setattr(faiss, "index_gpu_to_cpu", to_cpu, raising=False)
    source = ArraySource(corpus[:4000])
    built = build_index(source, BuildSettings("IVF32,Flat", n_queries=200))
    assert built.device == "gpu" and moved == [("to", 0), ("back", None)] * 2
    monkeypatch.undo()
    on_cpu = build_index(source, BuildSettings("IVF32,Flat", n_queries=200))
    assert on_cpu.device == "cpu"
    assert built.tuning == on_cpu.tuning
    assert np.array_equal(
        built.index.search(corpus[:50], 10)[1], on_cpu.index.search(corpus[:50], 10)[1]
    )
