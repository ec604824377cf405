"""Clustered pairs stores each vector once on temporary disk: the same lists and pairs as the
previous layout (every vector written into each of its nprobe blocks, reimplemented here as
the oracle), ``_work/`` at most 1.5x the vectors, the disk refusal before anything is written,
and a progress line per searched block group."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import apache_beam.testing.test_pipeline as beam_testing
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from planted_vectors import clustered_vectors, write_embeddings
from sbert_pipeline.io.centroids import load_centroids
from sbert_pipeline.io.pairs_output import read_neighbors, read_pairs
from sbert_pipeline.io.resources import ResourceError
from sbert_pipeline.pairs import transforms
from sbert_pipeline.pairs.group_progress import DESCRIPTION
from sbert_pipeline.pairs.merge import merge_neighbors, merge_pairs
from sbert_pipeline.pairs.output_tables import neighbors_table, pairs_table
from sbert_pipeline.pairs.row_store import read_rows_at, write_rows
from sbert_pipeline.vectors.block_plan import nearest_centroids
from sbert_pipeline.vectors.block_search import search_block
from sbert_pipeline.vectors.progress import enable_progress

from tests.stage_commands import pairs as run

K, THRESHOLD, NPROBE = 5, 0.9, 3


def local():
    return beam_testing.TestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, list[str], np.ndarray]:
    """900 vectors of 384 dims (40 of them near-duplicates of others) in 3 + 1 shards, ids
    out of row order."""
    rng = np.random.default_rng(3)
    background = clustered_vectors(860, 384, clusters=9, spread=0.7, seed=3)
    twins = background[:40] + 0.01 * rng.standard_normal((40, 384), dtype=np.float32)
    twins /= np.linalg.norm(twins, axis=1, keepdims=True)
    vectors = np.concatenate([background, twins])
    ids = [f"item{j}" for j in rng.permutation(len(vectors))]
    root = tmp_path_factory.mktemp("clustered_disk")
    first = write_embeddings(root / "a", ids[:600], vectors[:600], shards=3)
    second = write_embeddings(root / "b", ids[600:], vectors[600:], shards=1)
    return root, ids, vectors, [first, second]


def args(data, output: Path, *extra: str) -> list[str]:
    _, _, _, inputs = data
    return [
        "--embeddings",
        *map(str, inputs),
        "--output",
        str(output),
        "--method",
        "clustered",
        "--k",
        str(K),
        "--threshold",
        str(THRESHOLD),
        "--clusters",
        "20",
        "--nprobe",
        str(NPROBE),
        "--shards",
        "2",
        "--recall-sample",
        "50",
        *extra,
    ]


def old_layout(ids: list[str], vectors: np.ndarray, centroids: np.ndarray, nprobe: int):
    """The previous pipeline's result, from scratch: each block holds the rows that probe it,
    in id order, searched exactly; an item's lists from its blocks merged, pairs kept once."""
    order = np.argsort(np.array(ids))
    sorted_ids = pa.array([ids[i] for i in order])
    sorted_vectors = np.ascontiguousarray(vectors[order], np.float32)
    probes = nearest_centroids(sorted_vectors, centroids, nprobe)
    lists, pairs = [], []
    for block in range(len(centroids)):
        members = np.flatnonzero((probes == block).any(axis=1))  # ascending: id order
        if not len(members):
            continue
        result = search_block(sorted_vectors[members].copy(), K, threshold=THRESHOLD)
        block_ids = sorted_ids.take(pa.array(members))
        lists.append(
            neighbors_table(block_ids, np.arange(len(members)), result.indices, result.scores)
        )
        pairs.append(pairs_table(block_ids, result.pair_a, result.pair_b, result.pair_scores))
    return merge_neighbors(lists, K), merge_pairs(pairs)


@pytest.fixture(scope="module")
def clustered(data, tmp_path_factory):
    """One run, with the size of ``_work/`` taken whenever a group or shard leaves a file."""
    output = tmp_path_factory.mktemp("run") / "pairs"
    sizes: list[int] = []
    write_json = transforms.write_json

    def measured(path, value):
        write_json(path, value)
        work = Path(path.split("/_work/")[0]) / "_work"
        sizes.append(sum(f.stat().st_size for f in work.rglob("*") if f.is_file()))

    transforms.write_json = measured
    try:
        run(args(data, output), test_pipeline=local())
    finally:
        transforms.write_json = write_json
    return output, sizes


def test_lists_and_pairs_equal_the_previous_layout(data, clustered):
    _, ids, vectors, _ = data
    output, _ = clustered
    neighbors, pairs = old_layout(ids, vectors, load_centroids(str(output / "centroids.npy")), 3)
    written = read_neighbors(str(output))
    written = written.take(pc.sort_indices(written, [("id", "ascending")]))
    assert written.num_rows == len(ids)
    assert written.to_pylist() == neighbors.to_pylist()
    found = read_pairs(str(output))
    found = found.take(pc.sort_indices(found, [("id_a", "ascending"), ("id_b", "ascending")]))
    assert found.num_rows > 0
    assert found.to_pylist() == pairs.to_pylist()


def test_temporary_disk_holds_each_vector_once(data, clustered):
    _, _, vectors, _ = data
    output, sizes = clustered
    manifest = json.loads((output / "_manifest.json").read_text())
    assert manifest["clustered"]["nprobe"] == NPROBE
    groups = manifest["clustered"]["block_groups"]
    assert len(sizes) >= groups and max(sizes) > vectors.nbytes  # measured while it ran
    # The previous layout stored each vector nprobe = 3 times: 3x the vectors and more.
    assert max(sizes) <= 1.5 * vectors.nbytes
    assert manifest["clustered"]["temporary_disk_bytes_estimated"] >= max(sizes)
    assert not (output / "_work").exists()


def test_too_little_free_disk_is_refused_before_anything_is_written(data, tmp_path, monkeypatch):
    monkeypatch.setattr("sbert_pipeline.io.resources.free_disk", lambda path: 1000)
    output = tmp_path / "pairs"
    with pytest.raises(ResourceError, match=r"temporary disk under .*_work.*--nprobe 1"):
        run(args(data, output), test_pipeline=local())
    assert not (output / "_manifest.json").exists()
    assert not list(output.rglob("*.f32")) and not list(output.rglob("from-*.parquet"))


def test_progress_counts_the_searched_block_groups(data, tmp_path, monkeypatch):
    stream = io.StringIO()
    monkeypatch.setattr(
        "sbert_pipeline.pairs.stage.show_progress_unless_quiet",
        lambda here=True: enable_progress(stream=stream, interval=0),
    )
    try:
        run(args(data, tmp_path / "pairs"), test_pipeline=local())
    finally:
        enable_progress(False)
    groups = json.loads((tmp_path / "pairs" / "_manifest.json").read_text())["clustered"]
    total = groups["block_groups"]
    assert total > 1
    lines = [line for line in stream.getvalue().splitlines() if line.startswith(DESCRIPTION)]
    assert lines and lines[-1].startswith(f"{DESCRIPTION}: {total}/{total} groups (100.0%)")
    assert "pairs: exact neighbours of the sample queries: " in stream.getvalue()


def test_rows_are_gathered_by_number(tmp_path):
    rows = np.arange(40, dtype=np.float32).reshape(10, 4)
    path = str(tmp_path / "v.f32")
    assert write_rows(path, [rows[:6], rows[6:]]) == 10
    assert os.path.getsize(path) == rows.nbytes
    np.testing.assert_array_equal(read_rows_at(path, 4, np.array([7, 0, 7, 3])), rows[[7, 0, 7, 3]])
    with pytest.raises(ValueError, match="row 10 asked of a file of 10 rows"):
        read_rows_at(path, 4, np.array([10]))
    with pytest.raises(ValueError, match="not a whole number of 3-d rows"):
        read_rows_at(path, 3, np.array([0]))
