"""``sbert run`` on a local Spark cluster of 2 workers (``local-cluster.sh up``; the job names
only ``runner: spark`` and the master URL ``up`` printed): embed, pairs and dedup run on it and
their outputs equal the local runner's, and the job server Beam starts for the run is gone when
the run ends. (The Python API runs a stage there in ``test_spark_faults.py``.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from engine_jobs import embeddings, groups, manifest, pairs, write_corpus, write_job
from sbert_pipeline.jobs.run import run
from spark_cluster import SparkCluster

ROWS = 60


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
    ours, theirs = embeddings(job), embeddings(local_job)
    assert sorted(ours) == sorted(theirs) == sorted(f"s{n}" for n in range(ROWS))
    assert max(float(np.abs(ours[i] - theirs[i]).max()) for i in ours) <= 1e-5
    assert pairs(job) == pairs(local_job) and pairs(job)
    assert groups(job) == groups(local_job) and groups(job)
    # The job server Beam started for the run went with it.
    assert not local_spark.job_servers()
