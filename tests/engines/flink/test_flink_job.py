"""``sbert run`` on a local Flink session cluster (``deploy/flink/local-cluster.sh up``): a
JobManager, 2 TaskManagers and Beam's worker pool on free ports, in a temporary
``SBERT_FLINK_HOME``. With only ``runner: flink`` in the job, the master, the job server jar,
the worker pool and the parallelism come from the cluster's record; the embed and pairs stages
run on Flink (Beam's Java Flink runner), dedup on the launcher, and the outputs equal the
local runner's. ``down`` leaves nothing running."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from engine_jobs import embeddings, groups, pairs, write_corpus, write_job
from sbert_pipeline.jobs.run import run
from sbert_pipeline.stage_api.portable_settings import portable_kind

SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "flink" / "local-cluster.sh"
TASKMANAGERS = 2
ROWS = 40


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def script(home: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The script with its cache and state in ``home`` and this interpreter's python3 first,
    as the SDK workers must run it."""
    env = dict(os.environ, SBERT_FLINK_HOME=str(home))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def recorded_pids(home: Path) -> list[int]:
    lines = (home / "run" / "processes").read_text().splitlines()
    return [int(line.split("\t")[1]) for line in lines]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie has ended (its parent, here init, reaps it when it will)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(word) for word in out.stdout.split()]


def processes_naming(text: str) -> list[str]:
    """The command lines of this machine's processes that name ``text`` (the Flink home),
    except this process's children: the job servers Beam started from the cluster's jar, one
    per stage, which Beam stops when this process exits."""
    out = subprocess.run(["ps", "-eo", "ppid=,args="], capture_output=True, text=True).stdout
    rows = (line.strip().split(None, 1) for line in out.splitlines())
    return [
        args
        for ppid, args in (row for row in rows if len(row) == 2)
        if text in args and int(ppid) != os.getpid()
    ]


@pytest.fixture(scope="module")
def flink_home(tmp_path_factory) -> Iterator[Path]:
    """A local Flink cluster of 2 TaskManagers on free ports, its record in a temporary home
    that the stages read (``SBERT_FLINK_HOME``); stopped at the end, with nothing left."""
    home = tmp_path_factory.mktemp("flink-home")
    # On a machine whose Maven cache is empty the first fetch downloads about 155 MB.
    fetched = script(home, "fetch", timeout=900)
    assert fetched.returncode == 0, fetched.stderr
    ports = [free_port() for _ in range(3)]
    up = script(
        home,
        *(
            "up",
            "--workers",
            str(TASKMANAGERS),
            "--rest-port",
            str(ports[0]),
            "--rpc-port",
            str(ports[1]),
        ),
        *("--worker-pool-port", str(ports[2])),
    )
    saved = os.environ.get("SBERT_FLINK_HOME")
    os.environ["SBERT_FLINK_HOME"] = str(home)
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip().splitlines()[-1] == f"127.0.0.1:{ports[0]}"
        pids = recorded_pids(home)
        # The JobManager, the TaskManagers and the worker pool.
        assert len(pids) == TASKMANAGERS + 2 and all(alive(pid) for pid in pids)
        yield home
    finally:
        if saved is None:
            os.environ.pop("SBERT_FLINK_HOME", None)
        else:
            os.environ["SBERT_FLINK_HOME"] = saved
        pids = recorded_pids(home) if (home / "run" / "processes").exists() else []
        sdk_workers = [child for pid in pids for child in children(pid)]
        down = script(home, "down")
    assert down.returncode == 0, down.stderr
    assert not (home / "run" / "processes").exists()
    assert sdk_workers  # the stages ran on the pool's SDK workers, and down stops them too
    assert not [pid for pid in pids + sdk_workers if alive(pid)]
    assert processes_naming(str(home)) == []


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("flink_corpus") / "corpus.jsonl", ROWS)


def test_a_job_on_a_local_flink_cluster_equals_the_local_run(
    tmp_path, flink_home, corpus, tiny_st_dir
):
    local, job = tmp_path / "local", tmp_path / "flink"
    run([str(write_job(tmp_path / "local.yaml", local, corpus, tiny_st_dir))])
    flink = write_job(tmp_path / "flink.yaml", job, corpus, tiny_st_dir, runner="flink")
    summary = run([str(flink)])
    assert {stage.name: stage.status for stage in summary.stages} == dict.fromkeys(
        ["embed", "pairs", "dedup"], "ran"
    )
    for folder in ("embeddings", "pairs"):
        written = json.loads((job / folder / "_manifest.json").read_text())
        assert portable_kind(written["runner"]) == "flink", folder
    ours, theirs = embeddings(job), embeddings(local)
    assert sorted(ours) == sorted(theirs) and len(ours) == ROWS
    assert max(float(np.abs(ours[i] - theirs[i]).max()) for i in ours) <= 1e-5
    assert pairs(job) == pairs(local) and pairs(job)
    assert groups(job) == groups(local) and groups(job)
