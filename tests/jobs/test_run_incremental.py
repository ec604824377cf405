"""``sbert run`` with ``incremental: true`` over days: a file added, then a file removed.

Each stage's own tests compare its incremental run with a from-scratch one; this one checks the
chain as a user runs it: embed publishes a version whose unchanged parts the later stages
recognise, every stage says what it reused, the pairs equal ``sbert pairs`` from scratch on the
same vectors bit for bit, and dedup removes the new copy of an old text, never the old one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sbert_pipeline import pairs
from sbert_pipeline.io.output_dir import listed_parts, read_manifest
from sbert_pipeline.jobs.run import run

INCREMENTAL_STAGES = ("embeddings", "index", "clusters", "pairs")
# The tiny random model puts most texts close together; a copy scores 1.0 (to rounding), so
# thresholds this high pair only copies.
THRESHOLD = 0.9999


def write_jsonl(path: Path, rows: list[tuple[str, str]]) -> None:
    path.write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in rows), encoding="utf-8"
    )


def manifest(job_dir: Path, folder: str) -> dict:
    return json.loads((job_dir / folder / "_manifest.json").read_text())


def pairs_tables(folder: Path) -> tuple[list, list]:
    """The pairs and the neighbour lists of a pairs/ folder, sorted (row order is free); the
    parts its manifest lists, checked against their digests."""
    published = read_manifest(str(folder))

    def rows(dataset: str, columns: list[str]) -> list:
        found = []
        for part in listed_parts(str(folder), published, dataset) or []:
            table = pq.read_table(part, columns=columns)
            found += list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))
        return sorted(found, key=lambda row: row[0] if dataset == "neighbors" else row[:2])

    return (
        rows("pairs", ["id_a", "id_b", "score"]),
        rows("neighbors", ["id", "neighbor_ids", "scores"]),
    )


def from_scratch_pairs(job_dir: Path, output: Path) -> tuple[list, list]:
    """``sbert pairs`` run from scratch on the job's (incremental) embeddings."""
    options = pairs.Options(
        embeddings=(str(job_dir / "embeddings"),),
        output=str(output),
        k=5,
        threshold=THRESHOLD,
        method="exact",
    )
    pairs.run(options)
    return pairs_tables(output)


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_jsonl(
        folder / "a.jsonl", [(f"a{i}", f"first file sentence number {i}") for i in range(8)]
    )
    write_jsonl(
        folder / "b.jsonl", [(f"b{i}", f"second file, another text: {i * 7}") for i in range(8)]
    )
    return folder


def test_days_of_new_and_removed_files(tmp_path, corpus, tiny_st_dir) -> None:
    job_dir = tmp_path / "job"
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {job_dir}\n"
        f"input: {{path: '{corpus}/*.jsonl', id_field: id, keep_text: true}}\n"
        f"model: {tiny_st_dir}\n"
        "incremental: true\n"
        "stages: [embed, index, cluster, pairs, dedup]\n"
        "index: {target_recall: 0.95}\n"
        "cluster: {method: kmeans, k: 2}\n"
        f"pairs: {{k: 5, threshold: {THRESHOLD}, method: exact}}\n"
        f"dedup: {{threshold: {THRESHOLD}, method: components}}\n",
        encoding="utf-8",
    )
    run([str(config)])
    assert all(
        manifest(job_dir, folder)["incremental"]["mode"] == "full" for folder in INCREMENTAL_STAGES
    )

    # Day two: a new file, one of whose rows copies a text of a.jsonl.
    write_jsonl(
        corpus / "c.jsonl",
        [("c0", "first file sentence number 3"), ("c1", "a new text today"), ("c2", "more news")],
    )
    summary = run([str(config)])
    assert {stage.name: stage.status for stage in summary.stages} == dict.fromkeys(
        ("embed", "index", "cluster", "pairs", "dedup"), "ran"
    )
    for folder in INCREMENTAL_STAGES:
        record = manifest(job_dir, folder)["incremental"]
        assert record["mode"] == "incremental", (folder, record)
        assert (record["rows_old"], record["rows_new"], record["rows_gone"]) == (16, 3, 0)
    assert manifest(job_dir, "embeddings")["counts"]["embedded"] == 19
    assert pairs_tables(job_dir / "pairs") == from_scratch_pairs(job_dir, tmp_path / "check2")
    removed = (job_dir / "dedup" / "removed_ids.txt").read_text(encoding="utf-8").split()
    assert removed == ["c0"]  # the new copy goes; a3, kept yesterday, stays
    changes = manifest(job_dir, "dedup")["changes"]
    assert (changes["rows"]["new"], changes["rows"]["newly_removed"]) == (3, 1)
    assert changes["groups"]["new"] == 1

    # Day three: b.jsonl is gone; its rows leave every output.
    (corpus / "b.jsonl").unlink()
    run([str(config)])
    for folder in INCREMENTAL_STAGES:
        record = manifest(job_dir, folder)["incremental"]
        assert record["mode"] == "incremental", (folder, record)
        assert (record["rows_old"], record["rows_new"], record["rows_gone"]) == (11, 0, 8)
    found = pairs_tables(job_dir / "pairs")
    assert found == from_scratch_pairs(job_dir, tmp_path / "check3")
    assert not any(row[0].startswith("b") for row in found[1])
    assert all(not n.startswith("b") for row in found[1] for n in row[1])
    ids = pq.read_table(job_dir / "index" / "ids.parquet", columns=["id"]).column("id")
    assert sorted(ids.to_pylist()) == sorted([f"a{i}" for i in range(8)] + ["c0", "c1", "c2"])
