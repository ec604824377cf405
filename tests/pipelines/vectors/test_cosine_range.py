"""Stored cosines stay inside [-1, 1]: the helper and every table that stores one."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
from sbert_pipeline.cluster.assign import assignments_table
from sbert_pipeline.dedup.write import groups_parquet_table as groups_table
from sbert_pipeline.pairs.output_tables import neighbors_table, pairs_table
from sbert_pipeline.vectors.cosine_range import clamp_cosines


def unit_vector_whose_self_product_exceeds_one(dim: int = 24) -> np.ndarray:
    """A float32 unit vector v with float32 v . v > 1 (rounding), found by a seeded search."""
    rng = np.random.default_rng(0)
    while True:
        v = rng.standard_normal(dim).astype(np.float32)
        v = (v / np.linalg.norm(v)).astype(np.float32)
        if np.dot(v, v) > 1:
            return v


def test_clamp_keeps_the_range_and_unknown_scores():
    got = clamp_cosines(np.array([1.0000001, -1.0000001, 0.5, np.nan], np.float32))
    assert got.dtype == np.float32
    assert got[:3].tolist() == [1.0, -1.0, 0.5] and np.isnan(got[3])


def test_every_table_stores_a_self_score_as_at_most_one():
    v = unit_vector_whose_self_product_exceeds_one()
    self_score = np.dot(v, v)
    assert self_score > 1  # what the maths gives, before storing
    ids = pa.array(["a", "b"])
    neighbors = neighbors_table(ids, np.array([0]), np.array([[1]]), np.array([[self_score]]))
    assert neighbors.column("scores").to_pylist() == [[1.0]]
    pairs = pairs_table(ids, np.array([0]), np.array([1]), np.array([self_score]))
    assert pairs.column("score").to_pylist() == [1.0]
    assigned = assignments_table(["a", "b"], np.array([0, -1]), np.array([self_score, 0.3]))
    assert assigned.column("score").to_pylist() == [1.0, None]
    groups = SimpleNamespace(
        group=np.array([0, 0]), representative=np.array([True, False]), sizes=np.array([2])
    )
    stored = groups_table(ids, groups, np.array([0, 1]), np.array([np.nan, self_score]))
    assert stored.column("score").to_pylist() == [None, 1.0]


def test_cluster_summaries_store_clamped_scores():
    from sbert_pipeline.cluster.cluster_summaries import summarize

    v = unit_vector_whose_self_product_exceeds_one()
    over = np.float32(np.dot(v, v))
    (profile,) = summarize(["a", "b"], np.array([0, 0]), np.array([over, over]), 1, {})
    assert profile.representative_scores == [1.0, 1.0]
    assert profile.mean_score == 1.0
