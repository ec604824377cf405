"""The cluster stage under the memory budget: refused before any vector is read when the sample,
centroids, one batch and the per-row results (or, for communities, every vector) do not fit;
budget, parts and peak RSS recorded; progress of the refine passes and the assignment."""

from __future__ import annotations

import io
import json

import apache_beam.testing.test_pipeline as beam_testing
import numpy as np
import pytest
from planted import gaussian_mixture
from planted_vectors import write_embeddings
from sbert_pipeline.cluster import stage as cluster_stage
from sbert_pipeline.cluster.assign import sample_embeddings
from sbert_pipeline.cluster.memory import kmeans_parts
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.resources import ResourceError
from sbert_pipeline.vectors.progress import enable_progress
from sbert_pipeline.vectors.sampling import sample_rows

from tests.stage_commands import cluster as run

N, K, DIM = 600, 4, 16


def local():
    return beam_testing.TestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True)


@pytest.fixture
def planted(tmp_path):
    vectors, _ = gaussian_mixture(N, K, DIM, noise=0.5, seed=2)
    ids = [f"v{i}" for i in range(N)]
    return write_embeddings(tmp_path / "emb", ids, vectors, shards=3), vectors


def args(directory, output, *extra: str) -> list[str]:
    return ["--embeddings", str(directory), "--output", str(output), *extra]


def no_reading(*_args, **_kwargs):
    raise AssertionError("the vectors were read")


def test_kmeans_over_the_budget_is_refused_before_reading(planted, tmp_path, monkeypatch):
    directory, _ = planted
    monkeypatch.setattr(EmbeddingsDataset, "batches", no_reading)
    with pytest.raises(ResourceError) as err:
        run(args(directory, tmp_path / "out", "--k", str(K), "--memory-budget", "1MB"))
    message = str(err.value)
    assert message.startswith("k-means of 600 vectors of dimension 16 into 4 clusters")
    assert "needs" in message and "more than the budget of 976.56 KiB" in message
    assert "sample" in message and "assignment batch" in message and "resident" in message
    assert "use a smaller --sample or --k" in message
    assert not (tmp_path / "out").exists()


def test_communities_over_the_budget_are_refused_before_reading(planted, tmp_path, monkeypatch):
    directory, _ = planted
    monkeypatch.setattr(EmbeddingsDataset, "batches", no_reading)
    monkeypatch.setattr(EmbeddingsDataset, "load", no_reading)
    with pytest.raises(ResourceError, match=r"^communities of 600 vectors .* needs .* budget of"):
        run(args(directory, tmp_path / "out", "--method", "communities", "--memory-budget", "1MB"))
    assert not (tmp_path / "out").exists()


def test_the_count_has_the_sample_centroids_one_batch_and_the_rows():
    parts = kmeans_parts(100, 1_000_000, 384, 1000, 64_000)
    assert parts["sample"] == 2 * 64_000 * 384 * 4
    assert parts["centroids"] == 16 * 1000 * 384
    assert parts["assignment_batch"] == 3 * 65536 * 384 * 4 + 4 * 8192 * 1000
    assert parts["total"] == sum(v for name, v in parts.items() if name != "total")


def test_budget_parts_and_peak_are_recorded_and_progress_shown(planted, tmp_path, monkeypatch):
    directory, _ = planted
    stream = io.StringIO()
    # The stage turns progress on itself; here it writes every update to ``stream``.
    monkeypatch.setattr(
        cluster_stage, "show_progress", lambda *_: enable_progress(stream=stream, interval=0)
    )
    out = tmp_path / "out"
    try:
        run(args(directory, out, "--k", str(K), "--refine-passes", "2"), test_pipeline=local())
    finally:
        enable_progress(False)
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["memory_budget"]["source"].startswith("auto: 80% of")
    assert manifest["memory_needed"]["total"] <= manifest["memory_budget"]["bytes"]
    assert manifest["peak_rss_bytes"] > 0
    lines = stream.getvalue().splitlines()
    assert any(line.startswith("k-means: ") and "iterations" in line for line in lines)
    assert any(line.startswith("k-means refine: 1,200/1,200 vectors") for line in lines)
    assigned = [line for line in lines if line.startswith("cluster assign: ")]
    assert assigned and assigned[-1].startswith("cluster assign: 600/600 vectors (100.0%)")


def test_the_sample_is_the_chosen_rows_in_order(planted):
    directory, vectors = planted
    dataset = EmbeddingsDataset.open(str(directory))
    ids, sample = sample_embeddings([dataset], 100, seed=4, batch_size=64)
    chosen = sample_rows(N, 100, 4)
    assert ids == [f"v{i}" for i in chosen]
    assert np.array_equal(sample, vectors[chosen])
