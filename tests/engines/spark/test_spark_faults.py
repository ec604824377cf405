"""Faults on the local Spark cluster while the embed stage runs: a Spark executor killed once its
SDK worker took up the stage's work is replaced, Spark runs its tasks again and the stage
publishes whole (here through the Python API); the job server Beam started killed mid-stage
fails the command in one line, publishing nothing and leaving the previous output as it was."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from engine_jobs import write_corpus
from sbert_pipeline.jobs.cli import main
from spark_cluster import POLL_S, RUN_TIMEOUT_S, SparkCluster

# Enough texts that the embedding outlasts the kill (the tiny model embeds them in seconds).
ROWS = 600


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("fault_corpus") / "corpus.jsonl", ROWS)


def published_ids(output: Path) -> list[str]:
    manifest = json.loads((output / "_manifest.json").read_text())
    table = pq.read_table([output / shard for shard in manifest["shards"]])
    return table.column("id").to_pylist()


def manifest_bytes(output: Path) -> bytes | None:
    try:
        return (output / "_manifest.json").read_bytes()
    except FileNotFoundError:
        return None


def stage_under_way(
    cluster: SparkCluster,
    process: subprocess.Popen,
    output: Path,
    before: set[int],
    previous: bytes | None = None,
) -> psutil.Process:
    """The executor serving the first SDK worker that the pool started for the stage (not one
    of ``before``): the stage's work has reached the cluster. Nothing is published yet: the
    manifest is still ``previous`` (None: none)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "the stage ended before its work reached an executor"
        for pid, port in cluster.sdk_workers().items():
            executor = cluster.executor_serving(port) if pid not in before else None
            if executor is not None:
                assert manifest_bytes(output) == previous
                return executor
        time.sleep(POLL_S)
    raise AssertionError(f"no SDK worker served an executor in {RUN_TIMEOUT_S}s")


def test_an_executor_killed_mid_stage_is_replaced_and_the_stage_publishes_whole(
    tmp_path, local_spark: SparkCluster, corpus, tiny_st_dir
):
    output = tmp_path / "embeddings"
    code = textwrap.dedent(
        f"""
        from sbert_pipeline import embed

        options = embed.Options(
            input={str(corpus)!r},
            output={str(output)!r},
            model={str(tiny_st_dir)!r},
            id_field="id",
            beam_options=["--runner=spark", "--spark_master_url={local_spark.master_url}"],
        )
        print(embed.run(options).manifest["counts"]["embedded"])
        """
    )
    before = set(local_spark.sdk_workers())
    started = time.monotonic()
    with local_spark.running(local_spark.start_python(code)) as process:
        executor = stage_under_way(local_spark, process, output, before)
        application = Path(executor.cwd()).parent  # work-N/APP/EXECUTOR
        executor.kill()
        finished = local_spark.finish(process, started, RUN_TIMEOUT_S)
    assert not executor.is_running()
    # Spark launched another executor for the application in its place (2 at its start).
    launched = list(application.parent.parent.glob(f"work-*/{application.name}/*"))
    assert len(launched) >= 3, launched
    assert finished.status == 0, finished.err
    assert finished.out.strip().splitlines()[-1] == str(ROWS)
    ids = published_ids(output)
    assert len(ids) == ROWS and set(ids) == {f"s{n}" for n in range(ROWS)}  # rows in == rows out
    assert not local_spark.job_servers()


def test_the_job_server_gone_mid_stage_fails_in_one_line_and_publishes_nothing(
    tmp_path, local_spark: SparkCluster, corpus, tiny_st_dir, capsys
):
    output = tmp_path / "embeddings"
    local = ["embed", "--input", str(corpus), "--output", str(output)]
    local += ["--model", str(tiny_st_dir), "--id-field", "id"]
    assert main(local) == 0
    previous = manifest_bytes(output)
    capsys.readouterr()
    before = set(local_spark.sdk_workers())
    started = time.monotonic()
    argv = ["-q", *local, "--overwrite", "--runner", "spark"]
    argv += ["--spark_master_url", local_spark.master_url]
    with local_spark.running(local_spark.start_sbert(*argv)) as process:
        stage_under_way(local_spark, process, output, before, previous)
        jar = local_spark.job_server_jar()
        servers = [p for p in psutil.Process(process.pid).children() if jar in p.cmdline()]
        assert len(servers) == 1, "Beam did not start one job server for the stage"
        servers[0].kill()
        finished = local_spark.finish(process, started, RUN_TIMEOUT_S)
    assert finished.status == 1, finished.err
    lines = finished.err.strip().splitlines()
    assert len(lines) == 1, finished.err
    assert lines[0].startswith("sbert: job failed: the Spark job server stopped answering")
    assert lines[0].endswith("nothing was published")
    assert previous is not None and manifest_bytes(output) == previous
    assert not local_spark.job_servers()
