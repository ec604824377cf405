"""The trial that picks HNSW or IVF-Flat by measuring both on a sample."""

import json
import math

import numpy as np
import pytest
from planted_vectors import clustered_vectors, write_embeddings_dir
from sbert_pipeline.index.build import ArraySource
from sbert_pipeline.index.planner import ivf_nlist, plan_index
from sbert_pipeline.index.trial import choose_by_trial, trial_candidates, trial_size
from sbert_pipeline.io.resources import resident_bytes
from sbert_pipeline.io.sizes import parse_size

from tests.stage_commands import index as run

# N·d above the planner's Flat limit, so HNSW32 and IVF-Flat are both candidates.
N, DIM = 12_000, 384
TARGET = 0.9


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    return clustered_vectors(N, DIM, clusters=40, spread=1.0)


def test_trial_size_is_a_quarter_within_bounds():
    assert trial_size(50_000) == 50_000
    assert trial_size(300_000) == 100_000
    assert trial_size(1_000_000) == 250_000
    assert trial_size(100_000_000) == 1_000_000


def test_nothing_to_try_unless_both_families_fit():
    both = plan_index(1_000_000, 384, "ip", parse_size("2GB"))
    assert [c.family for c in trial_candidates(both)] == ["hnsw", "ivf_flat"]
    ivf_only = plan_index(1_000_000, 384, "ip", parse_size("1.6GB"))
    assert ivf_only.chosen.family == "ivf_flat" and trial_candidates(ivf_only) is None
    flat = plan_index(1_000, 384, "ip", parse_size("2GB"))
    assert flat.chosen.family == "flat" and trial_candidates(flat) is None


def test_trial_tunes_both_and_keeps_the_cheaper_prediction(vectors):
    plan = plan_index(N, DIM, "ip", parse_size("2GB"))
    choice = choose_by_trial(ArraySource(vectors), plan, TARGET, n_sample=6_000, n_queries=200)
    hnsw, ivf = choice.results
    assert (hnsw.factory, ivf.factory) == ("HNSW32", f"IVF{ivf_nlist(N)},Flat")
    assert ivf.trial_factory == f"IVF{ivf_nlist(6_000)},Flat"
    assert hnsw.recall >= TARGET and ivf.recall >= TARGET
    # IVF: centroids plus the sample's scanned share carried to N; HNSW: log-scaled.
    share = (ivf.distances_per_query - ivf_nlist(6_000)) / 6_000
    assert ivf.predicted_distances_per_query == pytest.approx(ivf_nlist(N) + share * N, rel=1e-3)
    growth = math.log(N) / math.log(6_000)
    assert hnsw.predicted_distances_per_query == pytest.approx(
        hnsw.distances_per_query * growth, rel=1e-3
    )
    cheaper = min(choice.results, key=lambda r: r.predicted_seconds_per_query)
    assert choice.chosen.factory == cheaper.factory
    assert (choice.n_sample, choice.n_queries) == (6_000, 200)


def test_job_builds_the_trial_winner_and_records_the_trial(tmp_path, vectors):
    embeddings = write_embeddings_dir(tmp_path / "embeddings", vectors, n_shards=2)
    output = tmp_path / "index"
    # The budget counts what this process already holds, which grows with the tests run before
    # this one in the same pytest process: 1 GiB of room above it, at least 2GB in all.
    budget = max(2 * 10**9, resident_bytes() + 2**30)
    summary = run(
        [
            "--embeddings", str(embeddings), "--output", str(output),
            "--memory-budget", str(budget), "--target-recall", str(TARGET),
            "--trial-sample", "6000", "--queries", "200",
        ]
    )  # fmt: skip
    manifest = json.loads((output / "_manifest.json").read_text())
    trial = manifest["trial"]
    assert [c["factory"] for c in trial["candidates"]] == ["HNSW32", f"IVF{ivf_nlist(N)},Flat"]
    assert summary.factory == manifest["factory"] == trial["chosen"]
    assert manifest["recall_at_10"] >= TARGET


def test_trial_can_be_turned_off(tmp_path, vectors):
    embeddings = write_embeddings_dir(tmp_path / "embeddings", vectors[:6000], n_shards=1)
    output = tmp_path / "index"
    run(["--embeddings", str(embeddings), "--output", str(output), "--trial-sample", "0"])
    manifest = json.loads((output / "_manifest.json").read_text())
    assert manifest["trial"] is None
    assert manifest["factory"] == manifest["plan"]["chosen"]["factory"]
