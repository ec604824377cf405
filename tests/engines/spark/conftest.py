"""Fixtures of the Spark tests: an empty temporary Spark home and a job server jar (nothing of
these starts Spark or Java); and one local cluster for the whole session (``local_spark``),
brought up by the cluster tests. Ports and ``java`` come from the engines' own conftest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_cluster import SparkCluster, spark_cluster
from spark_setup import JAR_NAME


@pytest.fixture(scope="session")
def local_spark(tmp_path_factory) -> Iterator[SparkCluster]:
    """A local cluster of 2 workers on free ports with a Spark home of its own, shared by the
    cluster tests; ``down`` at the end, which must leave none of its processes running."""
    with spark_cluster(tmp_path_factory.mktemp("local_spark") / "spark-home") as cluster:
        yield cluster


@pytest.fixture(autouse=True)
def spark_home(tmp_path, monkeypatch) -> Path:
    """An empty Spark home (no cluster recorded), and an empty Flink home, so the machine's own
    clusters never count."""
    home = tmp_path / "spark-home"
    (home / "run").mkdir(parents=True)
    monkeypatch.setenv("SBERT_SPARK_HOME", str(home))
    monkeypatch.setenv("SBERT_FLINK_HOME", str(tmp_path / "flink-home"))
    return home


@pytest.fixture
def jar(tmp_path) -> Path:
    """A job server jar named as the local cluster names it (empty: it is never run)."""
    path = tmp_path / "jars" / JAR_NAME
    path.parent.mkdir()
    path.write_bytes(b"")
    return path
