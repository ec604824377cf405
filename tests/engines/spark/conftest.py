"""Fixtures of the Spark tests: a local cluster's record in a temporary Spark home, ports that
answer or not, and a PATH with or without ``java`` (nothing of these starts Spark or Java); and
one local cluster for the whole session (``local_spark``), brought up by the cluster tests."""

from __future__ import annotations

import socket
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
def fake_java(tmp_path, monkeypatch) -> Path:
    """A PATH whose only ``java`` is a script that is never run (only looked up)."""
    bin_dir = tmp_path / "java-bin"
    bin_dir.mkdir()
    java = bin_dir / "java"
    java.write_text("#!/bin/sh\nexit 1\n")
    java.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return java


@pytest.fixture
def no_java(tmp_path, monkeypatch) -> None:
    """A PATH without ``java``."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.fixture
def listening() -> Iterator[str]:
    """HOST:PORT of a socket that accepts connections (a master, a pool, a job server)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.fixture
def closed() -> str:
    """HOST:PORT where nothing listens (a port just given back)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"127.0.0.1:{port}"


@pytest.fixture
def jar(tmp_path) -> Path:
    """A job server jar named as the local cluster names it (empty: it is never run)."""
    path = tmp_path / "jars" / JAR_NAME
    path.parent.mkdir()
    path.write_bytes(b"")
    return path
