"""Fixtures of the engine tests (Dask, Spark, Flink): ports that answer or not, and a PATH with
or without ``java``. Nothing here starts a cluster or Java."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest


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
