"""The index stage under one memory budget for the whole process: the planner counts what the
process holds besides the index, the stage refuses before reading, records the budget and its
peak RSS, sizes the trial from the budget, and reports the trial and the fill as progress."""

from __future__ import annotations

import io
import json

import faiss
import numpy as np
import pytest
from planted_vectors import clustered_vectors, write_embeddings_dir
from sbert_pipeline.index.build import (
    ArraySource,
    BuildSettings,
    build_index,
    gather_rows,
    sample_positions,
    take_rows,
    train_on_sample,
)
from sbert_pipeline.index.faiss_ops import default_train_sample, new_index, prepare_vectors
from sbert_pipeline.index.planner import (
    BATCH_COPIES,
    READER_BYTES,
    BudgetTooSmallError,
    IndexPlan,
    ProcessMemory,
    estimate_for_factory,
    hnsw_estimate,
    ivf_flat_estimate,
    ivf_nlist,
    plan_index,
)
from sbert_pipeline.index.trial import choose_by_trial, trial_bytes, trial_size
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.resources import ResourceError
from sbert_pipeline.io.sizes import parse_size
from sbert_pipeline.vectors.progress import enable_progress

from tests.stage_commands import index as run

N, DIM = 3000, 16
MB = 10**6


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory):
    vectors = clustered_vectors(N, DIM, clusters=30, spread=0.6)
    return write_embeddings_dir(tmp_path_factory.mktemp("budget") / "embeddings", vectors)


@pytest.fixture
def progress_stream():
    stream = io.StringIO()
    enable_progress(stream=stream, interval=0)
    yield stream
    enable_progress(False)


def args(embeddings, output, *extra: str) -> list[str]:
    return ["--embeddings", str(embeddings), "--output", str(output), *extra]


def test_the_planner_picks_ivf_pq_for_ten_million_vectors_under_4gb():
    process = ProcessMemory(resident=500 * MB, batch_rows=65536, query_rows=1000)
    plan = plan_index(10_000_000, 384, "ip", parse_size("4GB"), process)
    assert plan.chosen.family == "ivf_pq"
    assert plan.chosen.factory.startswith("OPQ") and ",IVF16384,PQ" in plan.chosen.factory
    parts = process.parts(plan.chosen, plan.n, plan.dim)
    assert parts["total"] <= 4 * 10**9
    # The training sample of 16,384 lists and three copies of it are counted.
    assert plan.chosen.train_vectors == 39 * 16384
    assert parts["training"] == 3 * plan.chosen.train_vectors * 384 * 4


def test_the_planners_count_includes_the_fixed_parts():
    budget = parse_size("2.5GB")
    alone = plan_index(1_000_000, 384, "ip", budget)
    assert alone.chosen.factory == "HNSW32"  # the index alone fits: 1.81 GB
    process = ProcessMemory(resident=300 * MB, batch_rows=65536, query_rows=1000)
    plan = plan_index(1_000_000, 384, "ip", budget, process)
    # HNSW32 plus what the process holds (2.62 GB) does not fit; HNSW16 (2.49 GB) does.
    assert not plan.fits(alone.chosen) and plan.chosen.factory == "HNSW16"
    parts = process.parts(plan.chosen, plan.n, plan.dim)
    assert parts["resident"] == 300 * MB
    assert parts["reading_batches"] == READER_BYTES + BATCH_COPIES * 65536 * 384 * 4
    assert parts["held_out_queries"] == 2 * 1000 * 384 * 4
    fill = parts["index"] + parts["reading_batches"]
    assert parts["total"] == 300 * MB + parts["held_out_queries"] + max(parts["training"], fill)
    assert plan.needed(plan.chosen) == parts["total"] <= budget
    record = plan.to_json()
    assert record["process"]["parts"]["total"] == parts["total"]
    assert record["considered"][0]["fits"] is False  # HNSW32, counted with the process


def test_the_default_training_sample_is_the_planners():
    for factory, n in (("IVF256,Flat", 50_000), ("OPQ16,IVF1024,PQ16", 2_000_000)):
        expected = estimate_for_factory(factory, n, 64, "ip").train_vectors
        assert default_train_sample(new_index(factory, 64, "ip"), n) == expected


def test_a_budget_nothing_fits_is_refused_before_reading(tmp_path, embeddings, monkeypatch):
    def no_reading(*_args, **_kwargs):
        raise AssertionError("the vectors were read")

    monkeypatch.setattr(EmbeddingsDataset, "batches", no_reading)
    with pytest.raises(BudgetTooSmallError) as err:
        run(args(embeddings, tmp_path / "out", "--memory-budget", "1MB"))
    message = str(err.value)
    assert isinstance(err.value, ResourceError)
    assert "3,000 vectors of dimension 16" in message and "needs" in message
    assert "more than the budget of 976.56 KiB (--memory-budget 1MB)" in message
    assert "resident" in message and "reading batches" in message
    assert not (tmp_path / "out").exists()


def test_an_explicit_factory_is_refused_when_its_build_does_not_fit(tmp_path, embeddings):
    with pytest.raises(ResourceError, match=r"--factory IVF16,Flat over 3,000 vectors .* needs"):
        run(args(embeddings, tmp_path / "out", "--factory", "IVF16,Flat", "--memory-budget", "1MB"))
    assert not (tmp_path / "out").exists()


def test_the_manifest_records_the_budget_and_the_peak(tmp_path, embeddings):
    output = tmp_path / "index"
    run(args(embeddings, output, "--factory", "IVF16,Flat"))
    manifest = json.loads((output / "_manifest.json").read_text())
    assert manifest["memory_budget"]["source"].startswith("auto: 80% of")
    assert manifest["memory_budget"]["bytes"] == manifest["memory_budget_bytes"] > 0
    assert 0 < manifest["peak_rss_bytes"] <= manifest["memory_budget_bytes"]


def test_take_rows_equals_fancy_indexing_in_place():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((1000, 8)).astype(np.float32)
    keep = np.sort(rng.choice(1000, 600, replace=False))
    expected = vectors[keep]
    taken = take_rows(vectors, keep, chunk=7)
    assert np.shares_memory(taken, vectors) and np.array_equal(taken, expected)


def test_training_in_place_gives_the_old_copies_result():
    vectors = clustered_vectors(4000, DIM, clusters=20, spread=0.6, seed=3)
    source = ArraySource(vectors)
    settings = BuildSettings("IVF32,Flat", n_queries=200, seed=5, use_gpu=False)
    trained = train_on_sample(source, settings)
    # The path before the budget work: gather, then a prepared copy of each part.
    train_rows, held_out = sample_positions(4000, trained.train_sample, 200, 5)
    rows = np.union1d(train_rows, held_out)
    sample = gather_rows(source, rows, 65536)
    queries = prepare_vectors(sample[np.searchsorted(rows, held_out)], "ip")
    train = prepare_vectors(sample[np.searchsorted(rows, train_rows)], "ip")
    old = new_index("IVF32,Flat", DIM, "ip")
    old.train(train)
    assert np.array_equal(trained.queries, queries)
    quantizer = faiss.extract_index_ivf(trained.index).quantizer
    old_quantizer = faiss.extract_index_ivf(old).quantizer
    assert np.array_equal(quantizer.reconstruct_n(0, 32), old_quantizer.reconstruct_n(0, 32))


def test_the_trial_sample_shrinks_to_the_budget():
    plan = plan_index(1_000_000, 384, "ip", parse_size("2GB"))
    assert trial_size(1_000_000) == 250_000
    room = 200 * MB
    size = trial_size(1_000_000, plan, room)
    assert 20_000 <= size < 250_000 and trial_bytes(size, plan) <= room
    assert trial_bytes(size, plan) >= hnsw_estimate(size, 384, 32).bytes
    assert trial_size(1_000_000, plan, 10 * MB) == 0  # too small a sample: no trial


def test_the_trial_and_the_fill_report_progress(progress_stream):
    vectors = clustered_vectors(N, DIM, clusters=30, spread=0.6)
    hnsw, ivf = hnsw_estimate(N, DIM, 32), ivf_flat_estimate(N, DIM, ivf_nlist(N))
    plan = IndexPlan(N, DIM, "ip", 10**9, hnsw, (hnsw, ivf))
    choice = choose_by_trial(ArraySource(vectors), plan, 0.9, n_sample=2000, n_queries=100)
    assert choice is not None
    build_index(ArraySource(vectors), BuildSettings("IVF16,Flat", n_queries=100, use_gpu=False))
    lines = progress_stream.getvalue().splitlines()
    assert any(line.startswith("index trial: 1/2 candidates (50.0%)") for line in lines)
    fill = [line for line in lines if line.startswith("index fill: ")]
    assert fill and "vectors/s" in fill[-1] and "/2,900 vectors" in fill[-1]
