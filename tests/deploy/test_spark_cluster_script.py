"""deploy/spark/local-cluster.sh and deploy/flink/local-cluster.sh without a cluster: their
arguments, their state and `down` (both source deploy/lib/local-cluster-common.sh).

Nothing here fetches or starts Spark or Flink: every case stops before the script would call
Maven, and the processes that `down` must stop (or leave alone) are plain `sleep`s recorded by
hand.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# Each script, the variable naming its home, its cluster's name and an option of its `up`.
CLUSTERS = {
    "spark": ("SBERT_SPARK_HOME", "Spark", "--master-port"),
    "flink": ("SBERT_FLINK_HOME", "Flink", "--rest-port"),
}


@pytest.fixture(params=sorted(CLUSTERS))
def cluster(request) -> str:
    """Which script a test runs: every test here runs with each."""
    return request.param


def run_script(home: Path, *args: str, cluster: str = "spark") -> subprocess.CompletedProcess[str]:
    """The script with its cache and state in ``home`` and this interpreter's python3 first."""
    env = dict(os.environ, **{CLUSTERS[cluster][0]: str(home)})
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    script = DEPLOY / cluster / "local-cluster.sh"
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=60
    )


def started_at(pid: int) -> str:
    out = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True)
    return " ".join(out.stdout.split())


@pytest.fixture
def sleeper():
    """A process in a group of its own, as `up` starts them; killed at the end if still there."""
    process = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def record(home: Path, *rows: tuple[str, int, str]) -> Path:
    state = home / "run" / "processes"
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("".join(f"{name}\t{pid}\t{start}\n" for name, pid, start in rows))
    return state


def test_help_lists_the_commands(tmp_path: Path, cluster) -> None:
    result = run_script(tmp_path, "--help", cluster=cluster)
    assert result.returncode == 0
    home, _, port_option = CLUSTERS[cluster]
    for command in ("up [--workers N]", "down", "status", "fetch", home, port_option):
        assert command in result.stdout


@pytest.mark.parametrize("args", [(), ("start",)])
def test_a_missing_or_unknown_command_is_a_usage_error(tmp_path: Path, cluster, args) -> None:
    result = run_script(tmp_path, *args, cluster=cluster)
    assert result.returncode == 2
    assert f"usage: deploy/{cluster}/local-cluster.sh" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--workers", "0"), "--workers takes a whole number of 1 or more, not '0'"),
        (("--workers", "two"), "--workers takes a whole number of 1 or more, not 'two'"),
        (("--workers",), "--workers takes a value"),
        (("--workers=3x",), "--workers takes a whole number of 1 or more, not '3x'"),
        (("--worker-pool-port", "x"), "a port is a number, not 'x'"),
        (("--job-port=8o99",), "a port is a number, not '8o99'"),
        (("--job-server=yes",), "unknown option for up: --job-server=yes"),
        (("--cores", "2"), "unknown option for up: --cores"),
    ],
)
def test_up_refuses_bad_options_before_fetching(tmp_path: Path, cluster, args, message) -> None:
    result = run_script(tmp_path, "up", *args, cluster=cluster)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"local-cluster: {message}" + _tail(message)]
    assert not (tmp_path / "run").exists()
    assert not any(tmp_path.glob("beam-*"))


def _tail(message: str) -> str:
    return " (see --help)" if message.startswith("unknown option") else ""


def test_each_script_has_its_own_ports(tmp_path: Path) -> None:
    # A port option of the other cluster's script is unknown: each names its own processes.
    for cluster, other in (("spark", "flink"), ("flink", "spark")):
        option = CLUSTERS[other][2]
        result = run_script(tmp_path, "up", option, "1", cluster=cluster)
        assert f"unknown option for up: {option}" in result.stderr


def test_up_refuses_when_a_cluster_is_recorded(tmp_path: Path, cluster, sleeper) -> None:
    state = record(tmp_path, ("master", sleeper.pid, started_at(sleeper.pid)))
    result = run_script(tmp_path, "up", cluster=cluster)
    assert result.returncode == 1
    assert f"a cluster is already recorded in {state}: run down first" in result.stderr
    assert sleeper.poll() is None


def test_down_and_status_with_nothing_recorded(tmp_path: Path, cluster) -> None:
    down = run_script(tmp_path, "down", cluster=cluster)
    assert down.returncode == 0
    assert "nothing to stop" in down.stderr
    status = run_script(tmp_path, "status", cluster=cluster)
    assert status.returncode == 1
    assert status.stdout.strip() == f"no local {CLUSTERS[cluster][1]} cluster is up"


def test_down_stops_a_recorded_process_and_forgets_it(tmp_path: Path, cluster, sleeper) -> None:
    state = record(tmp_path, ("worker-1", sleeper.pid, started_at(sleeper.pid)))
    (tmp_path / "run" / "cluster.env").write_text("BEAM_WORKER_POOL=localhost:1\n")
    assert "worker-1: running" in run_script(tmp_path, "status", cluster=cluster).stdout
    result = run_script(tmp_path, "down", cluster=cluster)
    assert result.returncode == 0, result.stderr
    assert f"stopped worker-1 (pid {sleeper.pid})" in result.stderr
    assert sleeper.wait(timeout=10) is not None
    assert not state.exists() and not (tmp_path / "run" / "cluster.env").exists()


def test_down_leaves_alone_a_process_that_reuses_a_recorded_id(
    tmp_path: Path, cluster, sleeper
) -> None:
    # The id is alive but started at another time: not the process that `up` started.
    record(tmp_path, ("master", sleeper.pid, "Thu Jan  1 00:00:00 1970"))
    result = run_script(tmp_path, "down", cluster=cluster)
    assert result.returncode == 0, result.stderr
    assert f"master (pid {sleeper.pid}) is already gone" in result.stderr
    time.sleep(0.2)
    assert sleeper.poll() is None


def test_status_reports_a_recorded_process_that_is_gone(tmp_path: Path, cluster) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    record(tmp_path, ("worker-pool", finished.pid, "Thu Jan  1 00:00:00 1970"))
    (tmp_path / "run" / "cluster.env").write_text("SPARK_MASTER_URL=spark://127.0.0.1:7077\n")
    result = run_script(tmp_path, "status", cluster=cluster)
    assert result.returncode == 1
    assert f"worker-pool: gone (pid {finished.pid})" in result.stdout
    assert "SPARK_MASTER_URL=spark://127.0.0.1:7077" in result.stdout


def test_down_forgets_the_settings_of_an_up_that_started_nothing(tmp_path: Path, cluster) -> None:
    # An `up` that failed before its first process leaves an empty record and its settings,
    # which would otherwise name a worker pool that is not there.
    record(tmp_path)
    settings = tmp_path / "run" / "cluster.env"
    settings.write_text("BEAM_WORKER_POOL=localhost:1\n")
    result = run_script(tmp_path, "down", cluster=cluster)
    assert result.returncode == 0 and "nothing to stop" in result.stderr
    assert not settings.exists() and not (tmp_path / "run" / "processes").exists()
