"""The portable path that Spark and Flink job servers take, run here on Beam's own services.

``--runner PortableRunner --job_endpoint HOST:PORT`` submits the pipeline to a job service, and
``--environment_type EXTERNAL --environment_config HOST:PORT`` has that service ask a worker pool
to start the SDK workers as separate processes. Beam's Python job service
(``local_job_service_main``) stands in for the Spark or Flink job server and its worker pool
(``worker_pool_main``) for the pool on each cluster host, so nothing is downloaded (no Docker
image, no job-server jar). The test starts both as subprocesses and always stops them.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from corpus_files import GOOD_TEXTS, write_bad_jsonl, write_corpus
from sbert_pipeline.io.pairs_output import read_neighbors, read_pairs

from tests.stage_commands import embed as run_embed
from tests.stage_commands import pairs as run_pairs

# A guard against a service that never comes up, so the test fails instead of hanging.
STARTUP_LIMIT_S = 120
# worker_pool_main logs the address it bound (the port is chosen by the system: no race).
POOL_ADDRESS = re.compile(r"Started worker pool servicer at port: (\S+)")


@dataclass(frozen=True)
class PortableServices:
    """A running job service and worker pool, and the worker pool's log."""

    job_endpoint: str
    worker_pool: str
    pool_log: Path

    def beam_args(self) -> list[str]:
        """The Beam options of a run submitted to the job service, workers from the pool."""
        return [
            "--runner",
            "PortableRunner",
            "--job_endpoint",
            self.job_endpoint,
            "--environment_type",
            "EXTERNAL",
            "--environment_config",
            self.worker_pool,
            "--sdk_worker_parallelism",
            "1",
        ]


def _start(stack: ExitStack, args: list[str], log: Path) -> subprocess.Popen:
    """Start ``python -m ARGS`` in its own process group, stopped when ``stack`` closes."""
    # The pool starts each SDK worker as `python -c ...`: that must be this interpreter.
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
    }
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # one group: stopping it also stops the SDK workers
        )
    stack.callback(_stop, process)
    return process


def _stop(process: subprocess.Popen) -> None:
    """Stop the process and everything it started; SIGKILL if SIGTERM is not enough."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue
        break
    process.wait()


def _wait_for(name: str, process: subprocess.Popen, log: Path, ready: Callable[[], str | None]):
    """What ``ready`` returns once the service is up; RuntimeError with its log otherwise."""
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while (value := ready()) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            state = f"exited with {process.returncode}" if process.poll() is not None else "hung"
            raise RuntimeError(f"{name} {state} before it was ready:\n{log.read_text()}")
        time.sleep(0.1)
    return value


@pytest.fixture(scope="module")
def portable(tmp_path_factory) -> Iterator[PortableServices]:
    """Beam's job service and worker pool on free localhost ports."""
    root = tmp_path_factory.mktemp("portable_services")
    port_file, job_log, pool_log = root / "job.port", root / "job.log", root / "pool.log"
    with ExitStack() as stack:
        job = _start(
            stack,
            [
                "apache_beam.runners.portability.local_job_service_main",
                "--port",
                "0",
                "--port_file",
                str(port_file),
                "--staging_dir",
                str(root / "staging"),
            ],
            job_log,
        )
        pool = _start(
            stack,
            ["apache_beam.runners.worker.worker_pool_main", "--service_port", "0"],
            pool_log,
        )
        port = _wait_for(
            "the job service",
            job,
            job_log,
            lambda: port_file.read_text() if port_file.exists() else None,
        )

        def pool_address() -> str | None:
            found = POOL_ADDRESS.search(pool_log.read_text())
            return found.group(1) if found else None

        address = _wait_for("the worker pool", pool, pool_log, pool_address)
        yield PortableServices(f"localhost:{port}", address, pool_log)


def _corpus(directory: Path) -> str:
    """Good and bad JSONL rows and a gzipped CSV: rejections and a truncation to count too."""
    write_bad_jsonl(directory)
    write_corpus(directory, "csv", GOOD_TEXTS, gz=True)
    return str(directory / "*")


def _embed_then_pairs(corpus: str, model: Path, out: Path, beam_args: list[str]):
    """``sbert embed`` and ``sbert pairs --method exact`` on its output; both summaries."""
    embedded = run_embed(
        [
            "--input",
            corpus,
            "--output",
            str(out / "embeddings"),
            "--model",
            str(model),
            "--id-field",
            "id",
            "--keep-text",
            *beam_args,
        ]
    )
    pairs = run_pairs(
        [
            "--embeddings",
            str(out / "embeddings"),
            "--output",
            str(out / "pairs"),
            "--method",
            "exact",
            "--k",
            "3",
            "--threshold",
            "0.9",
            "--ranges",
            "3",
            *beam_args,
        ]
    )
    return embedded, pairs


def _neighbour_lists(directory: Path) -> dict[str, tuple[list[str], list[float]]]:
    rows = read_neighbors(str(directory)).to_pylist()
    return {row["id"]: (row["neighbor_ids"], row["scores"]) for row in rows}


def _rejections(errors) -> list[dict]:
    """Every dead-letter row (ids may be missing), in a fixed order."""
    return sorted(errors.to_pylist(), key=repr)


def _pair_scores(directory: Path) -> dict[tuple[str, str], float]:
    return {(r["id_a"], r["id_b"]): r["score"] for r in read_pairs(str(directory)).to_pylist()}


def test_embed_and_pairs_on_a_job_service_equal_the_local_run(
    portable, tmp_path, tiny_st_dir, read_output
):
    corpus = _corpus(tmp_path / "in")
    local = _embed_then_pairs(corpus, tiny_st_dir, tmp_path / "local", [])
    remote = _embed_then_pairs(corpus, tiny_st_dir, tmp_path / "portable", portable.beam_args())
    print(remote[0].line(), remote[1].line(), sep="\n")  # what the portable run reports

    # The SDK workers ran in processes the pool started, not inside the job service.
    assert "Starting worker with command" in portable.pool_log.read_text()

    want, got = (
        read_output(tmp_path / "local" / "embeddings"),
        read_output(tmp_path / "portable" / "embeddings"),
    )
    assert got.manifest["runner"] == "PortableRunner" and want.manifest["runner"] == "FnApiRunner"
    assert got.manifest["counts"] == want.manifest["counts"]
    assert got.manifest["counts"]["rejected"] > 0 and got.manifest["counts"]["truncated"] == 1
    assert got.manifest["input"]["files"] == want.manifest["input"]["files"]
    assert (remote[0].read, remote[0].embedded, remote[0].rejected) == (
        local[0].read,
        local[0].embedded,
        local[0].rejected,
    )
    assert sorted(got.ids) == sorted(want.ids)
    want_vectors, got_vectors = want.vectors_by_id(), got.vectors_by_id()
    worst = max(np.abs(got_vectors[i] - want_vectors[i]).max() for i in want.ids)
    assert worst <= 1e-6
    assert _rejections(got.errors) == _rejections(want.errors)

    want_pairs, got_pairs = tmp_path / "local" / "pairs", tmp_path / "portable" / "pairs"
    want_manifest = json.loads((want_pairs / "_manifest.json").read_text())
    got_manifest = json.loads((got_pairs / "_manifest.json").read_text())
    assert got_manifest["runner"] == "PortableRunner"
    assert got_manifest["counts"] == want_manifest["counts"]
    assert got_manifest["counts"]["neighbor_rows"] == len(want.ids)
    lists, found = _neighbour_lists(want_pairs), _neighbour_lists(got_pairs)
    assert sorted(found) == sorted(lists)
    for item, (neighbours, scores) in lists.items():
        assert found[item][0] == neighbours
        np.testing.assert_allclose(found[item][1], scores, atol=1e-6, rtol=0)
    pair_scores, got_scores = _pair_scores(want_pairs), _pair_scores(got_pairs)
    assert sorted(got_scores) == sorted(pair_scores) and len(pair_scores) == remote[1].pairs
    assert max((abs(got_scores[p] - s) for p, s in pair_scores.items()), default=0.0) <= 1e-6
