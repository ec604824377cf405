"""``sbert run`` on a local Spark cluster of 2 workers (``local-cluster.sh up``; the job names
only ``runner: spark`` and the master URL ``up`` printed): embed, pairs and dedup run on it and
their outputs equal the local runner's, and the job server Beam starts for the run is gone when
the run ends. (The Python API runs a stage there in ``test_spark_faults.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.jobs.run import run
from spark_cluster import SparkCluster
from spark_data import write_corpus, write_job

ROWS = 60


def manifest(folder: Path) -> dict:
    return json.loads((folder / "_manifest.json").read_text())


def embeddings(folder: Path) -> dict[str, np.ndarray]:
    table = pq.read_table([folder / shard for shard in manifest(folder)["shards"]])
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "an id was written twice"
    vectors = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
    return dict(zip(ids, vectors, strict=True))


def pairs(folder: Path) -> set[tuple[str, str]]:
    table = pq.read_table(sorted((folder / "pairs").glob("part-*.parquet")))
    return {
        tuple(sorted(pair))
        for pair in zip(
            table.column("id_a").to_pylist(), table.column("id_b").to_pylist(), strict=True
        )
    }


def groups(job_dir: Path) -> set[frozenset[str]]:
    table = pq.read_table(job_dir / "dedup" / "groups.parquet")
    members: dict[int, set[str]] = {}
    for group, item in zip(
        table.column("group").to_pylist(), table.column("id").to_pylist(), strict=True
    ):
        members.setdefault(group, set()).add(item)
    return {frozenset(ids) for ids in members.values()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("spark_corpus") / "corpus.jsonl", ROWS)


@pytest.fixture(scope="module")
def local_job(tmp_path_factory, corpus, tiny_st_dir) -> Path:
    root = tmp_path_factory.mktemp("local_job")
    run([str(write_job(root / "job.yaml", root / "job", corpus, tiny_st_dir))])
    return root / "job"


def test_a_job_on_the_local_spark_cluster_equals_the_local_run(
    tmp_path, local_spark: SparkCluster, local_job, corpus, tiny_st_dir
):
    config = write_job(
        tmp_path / "job.yaml",
        tmp_path / "job",
        corpus,
        tiny_st_dir,
        runner="spark",
        beam={"spark_master_url": local_spark.master_url},
    )
    finished = local_spark.sbert("-q", "run", str(config))
    assert finished.status == 0, finished.err
    job = tmp_path / "job"
    state = json.loads((job / "_job_state.json").read_text())
    assert sorted(state["stages"]) == ["dedup", "embed", "pairs"]
    for folder in ("embeddings", "pairs"):
        assert manifest(job / folder)["runner"] == "spark", folder
    counts = manifest(job / "embeddings")["counts"]
    assert counts["read"] == counts["embedded"] == ROWS  # rows in == rows out
    ours, theirs = embeddings(job / "embeddings"), embeddings(local_job / "embeddings")
    assert sorted(ours) == sorted(theirs) == sorted(f"s{n}" for n in range(ROWS))
    assert max(float(np.abs(ours[i] - theirs[i]).max()) for i in ours) <= 1e-5
    assert pairs(job / "pairs") == pairs(local_job / "pairs") and pairs(job / "pairs")
    assert groups(job) == groups(local_job) and groups(job)
    # The job server Beam started for the run went with it.
    assert not local_spark.job_servers()
