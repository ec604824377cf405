"""sbert pairs stores the pair of two copies of a unit vector as 1.0, not 1.0000001."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from planted_vectors import write_embeddings

from tests.stage_commands import pairs as run

DIM = 24


def test_pairs_of_identical_unit_vectors_are_stored_as_one(tmp_path):
    rng = np.random.default_rng(0)
    while True:  # a unit vector whose float32 self inner product rounds past 1
        v = rng.standard_normal(DIM).astype(np.float32)
        v = (v / np.linalg.norm(v)).astype(np.float32)
        if np.float32(np.dot(v.astype(np.float64), v.astype(np.float64))) > 1:
            break
    others = rng.standard_normal((30, DIM)).astype(np.float32)
    others /= np.linalg.norm(others, axis=1, keepdims=True)
    vectors = np.vstack([v, v, v, others]).astype(np.float32)
    embeddings = write_embeddings(
        tmp_path / "emb", [f"i{n:02d}" for n in range(len(vectors))], vectors
    )
    out = tmp_path / "pairs"
    argv = ["--embeddings", str(embeddings), "--output", str(out), "--k", "3"]
    argv += ["--threshold", "0.99", "--method", "exact"]
    run(
        argv,
        test_pipeline=BeamTestPipeline(
            runner="FnApiRunner", is_integration_test=False, blocking=True
        ),
    )
    pairs = pq.read_table(sorted((out / "pairs").glob("part-*.parquet")))
    scores = pairs.column("score").to_pylist()
    assert sorted(
        zip(pairs.column("id_a").to_pylist(), pairs.column("id_b").to_pylist(), strict=True)
    ) == [
        ("i00", "i01"),
        ("i00", "i02"),
        ("i01", "i02"),
    ]
    assert scores == [1.0, 1.0, 1.0]
    neighbors = pq.read_table(sorted((out / "neighbors").glob("part-*.parquet")))
    assert max(max(s) for s in neighbors.column("scores").to_pylist()) <= 1.0
