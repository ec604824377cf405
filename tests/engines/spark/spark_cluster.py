"""A local Spark cluster for the tests, brought up and down with ``deploy/spark/local-cluster.sh``
on free ports in a Spark home of its own, and ``sbert`` run against it as a process of its own
with a hard time limit (a hang fails the test instead of blocking the run)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "deploy" / "spark" / "local-cluster.sh"
# The first fetch downloads about 270 MB from Maven Central (later ones copy from ~/.m2).
FETCH_TIMEOUT_S = 900
UP_TIMEOUT_S = 120
DOWN_TIMEOUT_S = 60
# One `sbert` command on the cluster: a job server's start, a Spark application per Beam stage.
RUN_TIMEOUT_S = 240
# How often a test looks at the processes of a running stage.
POLL_S = 0.05


class RunTimedOut(AssertionError):
    """An ``sbert`` command that did not end within its time limit (it was killed)."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that nothing listens on now (given back by the kernel)."""
    with ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]


def _script(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise RunTimedOut(f"local-cluster.sh {args[0]} did not end in {timeout}s") from err


def _ended(process: psutil.Process) -> bool:
    """Whether ``process`` (this very process, by its start time) ended or is a zombie."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@dataclass
class Finished:
    """An ``sbert`` command that ended: its exit status and output."""

    status: int
    out: str
    err: str
    seconds: float


@dataclass
class SparkCluster:
    """A running local cluster: its Spark home, master URL and the environment that runs
    ``sbert`` (and the SDK workers) against it."""

    home: Path
    master_url: str
    webui_port: int
    env: dict[str, str]
    up_seconds: float
    _recorded: list[psutil.Process] = field(default_factory=list)

    def recorded(self) -> dict[str, int]:
        """The processes ``up`` recorded, by name (master, worker-1, ..., worker-pool)."""
        lines = (self.home / "run" / "processes").read_text().splitlines()
        return {line.split("\t")[0]: int(line.split("\t")[1]) for line in lines if line}

    def job_server_jar(self) -> str:
        """The job server jar the cluster records (Beam starts a job server from it)."""
        for line in (self.home / "run" / "cluster.env").read_text().splitlines():
            if line.startswith("SPARK_JOB_SERVER_JAR="):
                return line.partition("=")[2]
        raise AssertionError("the cluster records no job server jar")

    def job_servers(self) -> list[psutil.Process]:
        """Running java processes of this cluster's job server jar (started by Beam)."""
        jar = self.job_server_jar()
        found = []
        for process in psutil.process_iter(["cmdline"]):
            if jar in (process.info["cmdline"] or []) and not _ended(process):
                found.append(process)
        return found

    def executors(self) -> list[psutil.Process]:
        """The Spark executors the workers run now."""
        found = []
        for name, pid in self.recorded().items():
            if not name.startswith("worker-") or name == "worker-pool":
                continue
            try:
                children = psutil.Process(pid).children()
            except psutil.NoSuchProcess:
                continue
            found += [c for c in children if "CoarseGrainedExecutorBackend" in _cmdline(c)]
        return [process for process in found if not _ended(process)]

    def sdk_workers(self) -> dict[int, int]:
        """The live Python SDK workers the pool started: pid -> the port of the executor's
        control service each one serves."""
        workers = {}
        try:
            children = psutil.Process(self.recorded()["worker-pool"]).children()
        except psutil.NoSuchProcess:
            return {}
        for child in children:
            found = re.search(r'SdkHarness\("[^"]*:(\d+)"', _cmdline(child))
            if found and not _ended(child):
                workers[child.pid] = int(found.group(1))
        return workers

    def executor_serving(self, port: int) -> psutil.Process | None:
        """The executor whose control service listens on ``port``."""
        for executor in self.executors():
            try:
                ports = {c.laddr.port for c in executor.net_connections("tcp") if not c.raddr}
            except psutil.NoSuchProcess:
                continue
            if port in ports:
                return executor
        return None

    def start_sbert(self, *args: str) -> subprocess.Popen:
        """``sbert ARGS`` as a process in a session of its own (with what it starts: Beam's job
        server), its output captured."""
        return subprocess.Popen(
            [sys.executable, "-m", "sbert_pipeline.jobs.cli", *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    @contextmanager
    def running(self, process: subprocess.Popen) -> Iterator[subprocess.Popen]:
        """``process`` (from :meth:`start_sbert`, :meth:`start_python`), its whole session
        killed if it still runs when the block ends (a test that failed half-way)."""
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()

    def finish(self, process: subprocess.Popen, started: float, timeout: float) -> Finished:
        """Wait for an ``sbert`` process; past ``timeout`` its whole session is killed and the
        test fails."""
        try:
            out, err = process.communicate(timeout=max(1.0, started + timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            raise RunTimedOut(
                f"sbert did not end in {timeout}s (killed); its last output: {err[-2000:]}"
            ) from None
        return Finished(process.returncode, out, err, time.monotonic() - started)

    def sbert(self, *args: str, timeout: float = RUN_TIMEOUT_S) -> Finished:
        """Run ``sbert ARGS`` to its end (at most ``timeout`` seconds)."""
        started = time.monotonic()
        with self.running(self.start_sbert(*args)) as process:
            return self.finish(process, started, timeout)

    def start_python(self, code: str) -> subprocess.Popen:
        """Python ``code`` as a process of its own with the cluster's environment (as
        :meth:`start_sbert`)."""
        return subprocess.Popen(
            [sys.executable, "-c", code],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def script_environ(home: Path) -> dict[str, str]:
    """This interpreter's environment with the Spark home, and its folder first on PATH (the
    script starts the SDK workers with the ``python3`` of PATH)."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "SBERT_SPARK_HOME": str(home),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def _family(pids: list[int]) -> list[psutil.Process]:
    """The processes ``pids`` and all their descendants, as they are now."""
    family = []
    for pid in pids:
        try:
            process = psutil.Process(pid)
            family += [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return family


@contextmanager
def spark_cluster(home: Path, *, workers: int = 2) -> Iterator[SparkCluster]:
    """A cluster of ``workers`` Spark workers (1 core each) on free ports, with its Spark home
    at ``home``; ``down`` when the block ends, which must leave none of its processes (nor a
    job server Beam started from its jar) running."""
    env = script_environ(home)
    fetched = _script(env, "fetch", timeout=FETCH_TIMEOUT_S)
    assert fetched.returncode == 0, fetched.stderr
    master, webui, pool, job = free_ports(4)
    started = time.monotonic()
    up = _script(
        env,
        *("up", "--workers", str(workers), "--master-port", str(master)),
        *("--webui-port", str(webui), "--worker-pool-port", str(pool), "--job-port", str(job)),
        timeout=UP_TIMEOUT_S,
    )
    up_seconds = time.monotonic() - started
    cluster = None
    try:
        assert up.returncode == 0, up.stderr
        cluster = SparkCluster(home, up.stdout.strip().splitlines()[-1], webui, env, up_seconds)
        yield cluster
    finally:
        left: list[psutil.Process] = []
        if (home / "run" / "processes").exists():
            recorded = [int(line.split("\t")[1]) for line in _lines(home / "run" / "processes")]
            family = _family(recorded)
            jobs = cluster.job_servers() if cluster is not None else []
            down = _script(env, "down", timeout=DOWN_TIMEOUT_S)
            deadline = time.monotonic() + 10
            while any(not _ended(p) for p in family) and time.monotonic() < deadline:
                time.sleep(0.2)
            left = [p for p in family + jobs if not _ended(p)]
            for process in left:  # never leave them to the next run, but fail
                process.kill()
            assert down.returncode == 0, down.stderr
        # The jars (264 MB) are fetched again next time; the logs stay for a failed run.
        for runtime in home.glob("beam-*-spark-*"):
            shutil.rmtree(runtime / "jars", ignore_errors=True)
        assert not left, f"down left processes running: {[p.pid for p in left]}"


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip()]
