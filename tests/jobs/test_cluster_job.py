import json
import logging

import apache_beam.testing.test_pipeline as beam_testing
import numpy as np
import pyarrow.parquet as pq
import pytest
from corpus_files import write_corpus
from planted import gaussian_mixture, overlapping_groups
from planted_vectors import write_embeddings
from sbert_pipeline.cluster.assign import ASSIGNMENTS_SCHEMA
from sbert_pipeline.cluster.cluster_summaries import SUMMARY_SCHEMA
from sbert_pipeline.io.centroids import load_centroids
from sbert_pipeline.io.embeddings import IncompatibleEmbeddingsError
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.vectors.communities import detect_communities
from sklearn.metrics import adjusted_rand_score

from tests.stage_commands import cluster as run
from tests.stage_commands import embed

TOPICS = {
    "music": "guitar music plays song band concert piano",
    "animals": "dog cat runs barks pet animal park",
    "weather": "sky sun rain cloud storm wind weather",
}


def topic_texts() -> list[str]:
    """60 texts of 2-11 topic words (the tiny random model's vectors differ by length)."""
    rng = np.random.default_rng(0)
    texts = []
    for words in TOPICS.values():
        vocabulary = words.split()
        for i in range(20):
            texts.append(" ".join(rng.choice(vocabulary, size=2 + i % 10)))
    return texts


def local():
    return beam_testing.TestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, tiny_st_dir):
    root = tmp_path_factory.mktemp("cluster_job")
    write_corpus(root / "corpus", "jsonl", topic_texts())
    argv = ["--input", str(root / "corpus" / "*"), "--output", str(root / "emb")]
    argv += ["--model", str(tiny_st_dir), "--id-field", "id", "--keep-text"]
    embed(argv, test_pipeline=local())
    return root


def read_dir(out):
    assignments = pq.read_table(sorted((out / "assignments").glob("part-*.parquet")))
    summary = pq.read_table(out / "summary.parquet")
    manifest = json.loads((out / "_manifest.json").read_text())
    return assignments, summary, manifest


def test_kmeans_end_to_end(embedded):
    out = embedded / "clusters"
    argv = ["--embeddings", str(embedded / "emb"), "--output", str(out), "--k", "3"]
    summary = run([*argv, "--sample", "40", "--seed", "7"], test_pipeline=local())
    assert "60 embeddings into 3 clusters" in summary.line()
    assignments, table, manifest = read_dir(out)
    assert assignments.schema.equals(ASSIGNMENTS_SCHEMA) and table.schema.equals(SUMMARY_SCHEMA)

    embeddings = pq.read_table(sorted((embedded / "emb").glob("part-*.parquet")))
    vectors = dict(
        zip(
            embeddings.column("id").to_pylist(),
            np.asarray(embeddings.column("embedding").to_pylist(), np.float32),
            strict=True,
        )
    )
    texts = dict(
        zip(embeddings.column("id").to_pylist(), embeddings.column("text").to_pylist(), strict=True)
    )
    ids = assignments.column("id").to_pylist()
    assert sorted(ids) == sorted(vectors)
    centroids = load_centroids(str(out / "centroids.npy"))
    assert centroids.shape == (3, 32)
    matrix = np.stack([vectors[i] for i in ids])
    cosines = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)) @ centroids.T
    labels = assignments.column("cluster").to_numpy()
    scores = assignments.column("score").to_numpy()
    np.testing.assert_array_equal(labels, cosines.argmax(axis=1))
    np.testing.assert_allclose(scores, cosines.max(axis=1), atol=1e-5)

    rows = table.to_pylist()
    assert [r["cluster"] for r in rows] == [0, 1, 2]
    assert [r["size"] for r in rows] == np.bincount(labels, minlength=3).tolist()
    for row in rows:
        # Nearest the centre first; equal scores in row order.
        members = np.flatnonzero(labels == row["cluster"])
        best = [ids[m] for m in members[np.lexsort((members, -scores[members]))][:5]]
        assert row["representative_ids"] == best
        assert row["representative_texts"] == [texts[i] for i in best]
        assert row["terms"] and set(row["terms"]) <= set(" ".join(TOPICS.values()).split())
    report = (out / "report.html").read_text()
    assert "<svg" in report and rows[0]["representative_texts"][0] in report

    assert manifest["method"] == "kmeans" and manifest["k"] == 3 and manifest["seed"] == 7
    assert manifest["sample"]["used"] == 40 and manifest["iterations"] >= 1
    assert manifest["objective"] == pytest.approx(float(np.sum(1 - scores)), rel=1e-5)
    assert manifest["fit"]["reseeded_clusters"] >= 0 and manifest["counts"]["items"] == 60
    emb_manifest = json.loads((embedded / "emb" / "_manifest.json").read_text())
    assert manifest["embeddings"][0]["manifest"] == emb_manifest
    assert manifest["weights_sha256"] == emb_manifest["weights_sha256"]
    assert not (out / "_STARTED").exists()


def test_texts_from_the_corpus_and_a_clamped_sample(embedded, caplog):
    out = embedded / "clusters_corpus_text"
    argv = ["--embeddings", str(embedded / "emb"), "--output", str(out), "--k", "2"]
    argv += ["--text-from", str(embedded / "corpus" / "*"), "--sample", "1000"]
    with caplog.at_level(logging.WARNING, logger="sbert_pipeline.cluster.stage"):
        run(argv, test_pipeline=local())
    assert "--sample 1000 is more than the 60 embeddings" in caplog.text
    _, table, manifest = read_dir(out)
    assert manifest["sample"] == {"requested": 1000, "used": 60}
    assert manifest["texts"]["found"] == manifest["texts"]["wanted"] == 60
    texts = set(topic_texts())
    assert all(t in texts for row in table.to_pylist() for t in row["representative_texts"])


def test_planted_clusters_across_directories(tmp_path):
    vectors, truth = gaussian_mixture(900, 6, 16, noise=0.5, seed=1)
    ids = [f"v{i}" for i in range(len(vectors))]
    first = write_embeddings(tmp_path / "a", ids[:500], vectors[:500], shards=3)
    second = write_embeddings(tmp_path / "b", ids[500:], vectors[500:], shards=1)
    out = tmp_path / "out"
    argv = ["--embeddings", str(first), str(second), "--output", str(out), "--k", "6"]
    run([*argv, "--refine-passes", "1"], test_pipeline=local())
    assignments, table, manifest = read_dir(out)
    assert len(list((out / "assignments").glob("part-*.parquet"))) == 4
    found = dict(
        zip(
            assignments.column("id").to_pylist(),
            assignments.column("cluster").to_pylist(),
            strict=True,
        )
    )
    assert adjusted_rand_score(truth, [found[i] for i in ids]) == pytest.approx(1.0)
    assert manifest["refine_passes"] == 1 and len(manifest["embeddings"]) == 2
    row = table.to_pylist()[0]  # no texts anywhere: ids only, no terms
    assert row["terms"] == [] and set(row["representative_texts"]) == {None}


def test_communities_end_to_end(tmp_path):
    vectors = overlapping_groups(seed=2, dim=32)[:1200]
    ids = [f"g{i}" for i in range(len(vectors))]
    source = write_embeddings(tmp_path / "emb", ids, vectors, shards=2)
    out = tmp_path / "out"
    argv = ["--embeddings", str(source), "--output", str(out), "--method", "communities"]
    summary = run([*argv, "--threshold", "0.75", "--min-size", "8", "--neighbors", "16"])
    expected = detect_communities(vectors, threshold=0.75, min_community_size=8)
    assignments, table, manifest = read_dir(out)
    labels = dict(
        zip(
            assignments.column("id").to_pylist(),
            assignments.column("cluster").to_pylist(),
            strict=True,
        )
    )
    for cluster, members in enumerate(expected):
        assert {labels[ids[m]] for m in members} == {cluster}
    outside = [row for row in assignments.to_pylist() if row["cluster"] == -1]
    assert len(outside) == len(ids) - sum(len(m) for m in expected) == summary.unclustered > 0
    assert all(row["score"] is None for row in outside)
    assert [r["size"] for r in table.to_pylist()] == [len(m) for m in expected]
    assert table.to_pylist()[0]["representative_ids"][0] == ids[expected[0][0]]  # the centre
    assert manifest["method"] == "communities" and manifest["k"] == len(expected)
    assert load_centroids(str(out / "centroids.npy")).shape == (len(expected), 32)


@pytest.fixture
def planted_dir(tmp_path):
    vectors, _ = gaussian_mixture(50, 3, 8, seed=0)
    return write_embeddings(tmp_path / "emb", [f"p{i}" for i in range(50)], vectors)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--k", "0"], "--k: must be at least 1"),
        (["--k", "51"], "more than the 50 embeddings"),
        ([], "--k: required with --method kmeans"),
        (["--k", "5", "--sample", "3"], "smaller than --k"),
        (["--method", "communities", "--k", "3"], "--k: applies to --method kmeans"),
        (["--method", "communities", "--threshold", "1.5"], "in \\[-1, 1\\]"),
    ],
)
def test_bad_options(planted_dir, tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        run(["--embeddings", str(planted_dir), "--output", str(tmp_path / "out"), *extra])
    assert not (tmp_path / "out").exists()


def test_bad_inputs(planted_dir, tmp_path):
    out = str(tmp_path / "out")
    manifest = json.loads((planted_dir / "_manifest.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "_manifest.json").write_text(json.dumps({**manifest, "weights_sha256": "1" * 64}))
    with pytest.raises(IncompatibleEmbeddingsError, match="weights_sha256"):
        run(["--embeddings", str(planted_dir), str(other), "--output", out, "--k", "2"])
    with pytest.raises(ValueError, match="no embeddings to cluster"):
        run(["--embeddings", str(other), "--output", out, "--k", "2"])
    with pytest.raises(FileNotFoundError, match="did not finish"):
        run(["--embeddings", str(tmp_path / "missing"), "--output", out, "--k", "2"])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "something").write_text("x")
    with pytest.raises(OutputExistsError):
        run(["--embeddings", str(planted_dir), "--output", out, "--k", "2"])
