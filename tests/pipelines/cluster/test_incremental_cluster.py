"""``sbert cluster --incremental``: new rows assigned to the stored centroids, old rows keeping
their assignments, compared with a fresh assignment of every row to those centroids."""

import json

import apache_beam.testing.test_pipeline as beam_testing
import numpy as np
import pyarrow.parquet as pq
import pytest
from planted_vectors import clustered_vectors, write_embeddings_version
from sbert_pipeline.cluster import Options
from sbert_pipeline.cluster.cluster_summaries import nearest_members
from sbert_pipeline.io.centroids import load_centroids
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.stage_api.options import OptionError
from sbert_pipeline.vectors.kmeans import assign

from tests.stage_commands import cluster as run

DIM, K = 32, 6


def part(name: str, n: int, draw: int) -> tuple[list[str], np.ndarray]:
    """``n`` planted vectors around 6 centres, ids ``{name}{row}``."""
    vectors = clustered_vectors(n, DIM, clusters=K, spread=0.8, draw=draw)
    return [f"{name}{i}" for i in range(n)], vectors


A, B, D, C = part("a", 600, 0), part("b", 400, 1), part("d", 300, 2), part("c", 500, 3)
B_CHANGED = (B[0], part("b", 400, 4)[1])  # the same ids, other vectors


def local():
    return beam_testing.TestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True)


def cluster(embeddings, output, *extra: str):
    argv = ["--embeddings", str(embeddings), "--output", str(output), "--k", str(K)]
    return run([*argv, "--seed", "3", *extra], test_pipeline=local())


def manifest(output) -> dict:
    return json.loads((output / "_manifest.json").read_text())


@pytest.fixture
def yesterday(tmp_path):
    """Embeddings with parts a, b, d and their full k-means clustering (made incrementally
    asked, with nothing to reuse yet)."""
    embeddings, output = tmp_path / "embeddings", tmp_path / "clusters"
    parts = {"part-a.parquet": A, "part-b.parquet": B, "part-d.parquet": D}
    write_embeddings_version(embeddings, parts)
    cluster(embeddings, output, "--incremental")
    return embeddings, output


def today(embeddings, **fields):
    """a unchanged, b rewritten with other vectors, c new, d removed."""
    (embeddings / "part-b.parquet").unlink()
    parts = {"part-a.parquet": A, "part-b.parquet": B_CHANGED, "part-c.parquet": C}
    write_embeddings_version(embeddings, parts, **fields)


def test_new_rows_join_the_stored_centroids_and_old_rows_keep_theirs(yesterday):
    embeddings, output = yesterday
    assert manifest(output)["incremental"]["mode"] == "full"
    centroids = load_centroids(str(output / "centroids.npy"))
    before = pq.read_table(sorted((output / "assignments").glob("part-*.parquet")))
    today(embeddings)
    summary = cluster(embeddings, output, "--incremental")

    record = manifest(output)["incremental"]
    assert record["mode"] == "incremental", record
    assert (record["rows_old"], record["rows_new"], record["rows_gone"]) == (600, 900, 700)
    assert summary.items == 1500 and manifest(output)["counts"]["items"] == 1500
    np.testing.assert_array_equal(load_centroids(str(output / "centroids.npy")), centroids)

    shards = sorted((output / "assignments").glob("part-*.parquet"))
    assert len(shards) == 3  # one per embeddings part, as a full run writes them
    after = pq.read_table(shards)
    ids = A[0] + B_CHANGED[0] + C[0]
    assert after.column("id").to_pylist() == ids  # embeddings row order; no removed row
    # The same result as assigning every current row to the stored centroids afresh.
    fresh = assign(np.concatenate([A[1], B_CHANGED[1], C[1]]), centroids, precision="float32")
    np.testing.assert_array_equal(after.column("cluster").to_numpy(), fresh.labels)
    np.testing.assert_allclose(after.column("score").to_numpy(), fresh.scores, atol=1e-5)
    # Old rows keep yesterday's assignment exactly (copied, not assigned again).
    old = before.slice(0, 600)
    assert after.slice(0, 600).equals(old)

    table = pq.read_table(output / "summary.parquet")
    sizes = np.bincount(fresh.labels, minlength=K)
    assert table.column("size").to_pylist() == sizes.tolist()
    nearest = nearest_members(fresh.labels.astype(np.int64), fresh.scores, K, 5)
    expected = [[ids[row] for row in rows] for rows in nearest]
    assert table.column("representative_ids").to_pylist() == expected


def test_refit_changed_settings_model_and_communities_are_full_runs(yesterday):
    embeddings, output = yesterday
    cluster(embeddings, output, "--incremental", "--refit")
    assert manifest(output)["incremental"] == {
        "mode": "full",
        "reason": "--refit: the centroids are fitted again on all rows",
    }
    cluster(embeddings, output, "--incremental", "--iterations", "5")
    record = manifest(output)["incremental"]
    assert record["mode"] == "full" and "k-means settings changed" in record["reason"]
    today(embeddings, weights_sha256="1" * 64)
    cluster(embeddings, output, "--incremental", "--iterations", "5")
    record = manifest(output)["incremental"]
    assert record["mode"] == "full" and "the model changed" in record["reason"]
    argv = ["--embeddings", str(embeddings), "--output", str(output), "--incremental"]
    run([*argv, "--method", "communities", "--threshold", "0.9", "--min-size", "5"])
    record = manifest(output)["incremental"]
    assert record == {
        "mode": "full",
        "reason": "communities have no centres that new rows could be assigned to",
    }


def test_only_appended_rows_and_no_incremental_refusal(yesterday):
    embeddings, output = yesterday
    with pytest.raises(OutputExistsError, match="already holds a complete output"):
        cluster(embeddings, output)
    parts = {"part-a.parquet": A, "part-b.parquet": B, "part-d.parquet": D, "part-c.parquet": C}
    write_embeddings_version(embeddings, parts)
    cluster(embeddings, output, "--incremental")
    record = manifest(output)["incremental"]
    assert (record["mode"], record["rows_old"], record["rows_new"], record["rows_gone"]) == (
        "incremental",
        1300,
        500,
        0,
    )


def test_refit_without_incremental_is_refused():
    with pytest.raises(OptionError, match="--refit: applies with --incremental"):
        Options(embeddings=("e",), output="o", k=3, refit=True)
    assert Options(embeddings=("e",), output="o", k=3, refit=True, incremental=True).refit
