"""A Dask scheduler and workers as their own processes (``dask scheduler``, ``dask worker``),
started where a test says: the workers in another working directory with their own TMPDIR,
as on other machines that share only the job's storage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 60


@dataclass
class DaskProcesses:
    """The running scheduler and worker processes."""

    scheduler_file: Path
    scheduler: subprocess.Popen
    workers: subprocess.Popen

    def worker_pids(self) -> list[int]:
        """The worker processes' pids (the children of the nanny processes)."""
        from distributed import Client

        with Client(scheduler_file=str(self.scheduler_file), timeout=10) as client:
            return list(client.run(os.getpid).values())

    def kill_scheduler(self) -> None:
        self.scheduler.send_signal(signal.SIGKILL)
        self.scheduler.wait(10)


def _cli(name: str) -> list[str]:
    return [sys.executable, "-m", f"distributed.cli.dask_{name}"]


@contextmanager
def dask_processes(root: Path, *, workers: int = 2) -> Iterator[DaskProcesses]:
    """A scheduler (its address in ``root/scheduler.json``) and ``workers`` worker processes
    of one thread each, run in ``root/worker-cwd`` with TMPDIR ``root/worker-tmp``; all
    stopped when the block ends."""
    scheduler_file = root / "scheduler.json"
    cwd, tmp = root / "worker-cwd", root / "worker-tmp"
    cwd.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen(
        [*_cli("scheduler"), "--port", "0", "--no-dashboard", "--scheduler-file", scheduler_file],
        **quiet,
    )
    env = {**os.environ, "TMPDIR": str(tmp)}
    worker_args = ["--scheduler-file", scheduler_file, "--nworkers", str(workers)]
    worker_args += ["--nthreads", "1", "--no-dashboard", "--local-directory", str(tmp)]
    started = None
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        started = subprocess.Popen([*_cli("worker"), *worker_args], cwd=cwd, env=env, **quiet)
        from distributed import Client

        with Client(scheduler_file=str(scheduler_file), timeout=START_TIMEOUT_S) as client:
            client.wait_for_workers(workers, timeout=START_TIMEOUT_S)
        yield DaskProcesses(scheduler_file, scheduler, started)
    finally:
        for process in (started, scheduler):
            if process is not None and process.poll() is None:
                process.terminate()
        for process in (started, scheduler):
            if process is not None:
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
