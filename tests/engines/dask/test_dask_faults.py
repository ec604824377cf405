"""Faults on a Dask cluster whose scheduler and workers are processes of their own, the
workers in another working directory with their own TMPDIR (as on other machines that share
only the job's storage): a stage still works there; a worker killed mid-stage is replaced and
the stage publishes whole; the scheduler gone mid-stage fails the stage in one line, publishing
nothing and leaving the previous output as it was."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from dask_processes import DaskProcesses, dask_processes
from engine_jobs import corpus_rows
from sbert_pipeline.jobs.cli import main

ROWS = 600


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_processes(tmp_path_factory.mktemp("dask_processes")) as processes:
        yield processes


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rows = corpus_rows(120)
    path = tmp_path_factory.mktemp("fault_corpus") / "corpus.jsonl"
    lines = [
        json.dumps({"id": f"r{n}", "text": rows[n % len(rows)]["text"] + f" {n}"})
        for n in range(ROWS)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def embed_argv(corpus: Path, output: Path, model: Path, cluster: DaskProcesses) -> list[str]:
    return [
        *["embed", "--input", str(corpus), "--output", str(output), "--model", str(model)],
        *["--id-field", "id", "--runner", "dask"],
        *["--dask_scheduler_file", str(cluster.scheduler_file)],
    ]


def published_ids(output: Path) -> list[str]:
    manifest = json.loads((output / "_manifest.json").read_text())
    table = pq.read_table([output / shard for shard in manifest["shards"]])
    return table.column("id").to_pylist()


def when_a_task_runs(cluster: DaskProcesses, action) -> threading.Thread:
    """Calls ``action(worker_address)`` from a thread once a task of the next pipeline runs on
    a worker (polling the scheduler)."""
    from distributed import Client

    def watch() -> None:
        with Client(scheduler_file=str(cluster.scheduler_file), timeout=10) as client:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                busy = [worker for worker, tasks in client.processing().items() if tasks]
                if busy:
                    action(client, busy[0])
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_workers_in_their_own_directories_embed_under_the_output_only(
    cluster, corpus, tmp_path, tiny_st_dir
):
    output = tmp_path / "embeddings"
    assert main(embed_argv(corpus, output, tiny_st_dir, cluster)) == 0
    assert sorted(published_ids(output)) == sorted(f"r{n}" for n in range(ROWS))
    root = cluster.scheduler_file.parent
    # Nothing was written where the workers run, nor left in their temporary folder
    # (Dask's own worker space aside).
    assert not list((root / "worker-cwd").iterdir())
    left = [p for p in (root / "worker-tmp").iterdir() if not p.name.startswith("dask-")]
    assert not left, left


def test_a_worker_killed_mid_stage_is_replaced_and_the_stage_publishes_whole(
    cluster, corpus, tmp_path, tiny_st_dir, capsys
):
    killed: list[int] = []

    def kill(client, address) -> None:
        pid = client.run(os.getpid, workers=[address])[address]
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    output = tmp_path / "embeddings"
    watcher = when_a_task_runs(cluster, kill)
    status = main(embed_argv(corpus, output, tiny_st_dir, cluster))
    watcher.join(5)
    assert killed, "no worker was killed while the stage ran"
    if status == 0:
        ids = published_ids(output)
        assert sorted(ids) == sorted(f"r{n}" for n in range(ROWS))  # rows in == rows out
        assert f"{ROWS} embedded" in capsys.readouterr().out
    else:  # Dask gave up on the work: one line, nothing published
        assert status == 1 and capsys.readouterr().err.count("\n") == 1
        assert not (output / "_manifest.json").exists()


def test_the_scheduler_gone_mid_stage_fails_in_one_line_and_publishes_nothing(
    tmp_path, corpus, tiny_st_dir, capsys
):
    output = tmp_path / "embeddings"
    local = ["embed", "--input", str(corpus), "--output", str(output)]
    assert main([*local, "--model", str(tiny_st_dir), "--id-field", "id"]) == 0
    before = (output / "_manifest.json").read_bytes()
    capsys.readouterr()
    with dask_processes(tmp_path / "doomed") as doomed:
        watcher = when_a_task_runs(doomed, lambda client, address: doomed.kill_scheduler())
        argv = [*embed_argv(corpus, output, tiny_st_dir, doomed), "--overwrite"]
        status = main(argv)
        watcher.join(5)
    err = capsys.readouterr().err
    assert status == 1, err
    assert err.count("\n") == 1 and "scheduler" in err
    assert (output / "_manifest.json").read_bytes() == before
