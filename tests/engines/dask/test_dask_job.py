"""``sbert run`` on a Dask LocalCluster of 2 worker processes (``runner: dask``,
``local[2]``): every Beam stage runs on it and the outputs equal the local runner's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from engine_jobs import embeddings, groups, manifest, pairs
from engine_jobs import write_job as write_engine_job
from sbert_pipeline.jobs.cli import main
from sbert_pipeline.jobs.run import run


def write_job(
    path: Path, job_dir: Path, corpus: Path, model: Path, cross_encoder: Path, **top
) -> Path:
    """A job of every Beam stage (embed, the sharded index fill, the cluster assignment, pairs,
    verify) and dedup; ``top`` adds job-wide keys (``runner``, ``beam``)."""
    return write_engine_job(
        path,
        job_dir,
        corpus,
        model,
        ("embed", "index", "cluster", "pairs", "verify", "dedup"),
        index={"factory": "Flat", "shards": 2},
        cluster={"method": "kmeans", "k": 6},
        verify={"model": str(cross_encoder)},
        dedup={"threshold": 0.5},
        **top,
    )


def assignments(job_dir: Path) -> dict[str, int]:
    table = pq.read_table(sorted((job_dir / "clusters" / "assignments").glob("part-*.parquet")))
    return dict(
        zip(table.column("id").to_pylist(), table.column("cluster").to_pylist(), strict=True)
    )


@pytest.fixture(scope="module")
def local_job(tmp_path_factory, dask_corpus, tiny_st_dir, tiny_cross_encoder) -> Path:
    root = tmp_path_factory.mktemp("local_job")
    config = write_job(
        root / "job.yaml", root / "job", dask_corpus, tiny_st_dir, tiny_cross_encoder
    )
    run([str(config)])
    return root / "job"


def test_a_job_on_a_local_dask_cluster_equals_the_local_run(
    tmp_path, local_job, dask_corpus, tiny_st_dir, tiny_cross_encoder
):
    config = write_job(
        tmp_path / "job.yaml",
        tmp_path / "job",
        dask_corpus,
        tiny_st_dir,
        tiny_cross_encoder,
        runner="dask",
        beam={"dask_client_address": "local[2]"},
    )
    summary = run([str(config)])
    job = tmp_path / "job"
    assert {stage.name: stage.status for stage in summary.stages} == dict.fromkeys(
        ["embed", "index", "cluster", "pairs", "verify", "dedup"], "ran"
    )
    for folder in ("embeddings", "clusters", "pairs", "verify"):
        assert manifest(job / folder)["runner"].endswith("DaskRunner"), folder
    assert manifest(job / "index")["shards"]["runner"].endswith("DaskRunner")
    ours, theirs = embeddings(job), embeddings(local_job)
    assert sorted(ours) == sorted(theirs)
    assert max(float(np.abs(ours[i] - theirs[i]).max()) for i in ours) <= 1e-5
    assert pairs(job) == pairs(local_job) and pairs(job)
    assert groups(job) == groups(local_job) and groups(job)
    # k-means is fitted on the launcher from a sample that follows the order of the shards,
    # which differs between runners; the assignment, in Beam, puts each vector in the cluster
    # of its nearest centroid.
    centroids = np.load(job / "clusters" / "centroids.npy")
    assigned = assignments(job)
    assert sorted(assigned) == sorted(ours)
    assert all(assigned[i] == int(np.argmax(centroids @ ours[i])) for i in ours)
    assert manifest(job / "index")["ntotal"] == len(ours)


def test_a_job_whose_scheduler_does_not_answer_is_refused_before_its_folder_exists(
    tmp_path, capsys, dask_corpus, tiny_st_dir, tiny_cross_encoder
):
    config = write_job(
        tmp_path / "job.yaml",
        tmp_path / "job",
        dask_corpus,
        tiny_st_dir,
        tiny_cross_encoder,
        runner="dask",
        beam={"dask_client_address": "127.0.0.1:9", "dask_connection_timeout": 1},
    )
    assert main(["run", str(config)]) == 2
    err = capsys.readouterr().err
    assert "no Dask scheduler answered" in err and err.count("\n") == 1
    assert not (tmp_path / "job").exists()
