"""Fixtures for pipeline tests: a local TestPipeline and a reader for embed outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from sbert_pipeline.io.schemas import ERRORS_DIR, ERRORS_SCHEMA


@pytest.fixture
def local_pipeline():
    """A TestPipeline on the in-process FnApiRunner (never Prism, which downloads)."""
    return TestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True)


class EmbedOutput:
    """An embed job's output directory, read back for assertions."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.manifest = json.loads((directory / "_manifest.json").read_text())
        self.table = pq.read_table(sorted(directory.glob("part-*.parquet")))
        error_files = sorted((directory / ERRORS_DIR).glob("part-*.parquet"))
        # Grouped (sharded) writes create no error file when nothing was rejected.
        self.errors = pq.read_table(error_files) if error_files else ERRORS_SCHEMA.empty_table()

    @property
    def ids(self) -> list[str]:
        return self.table.column("id").to_pylist()

    def vectors_by_id(self) -> dict[str, np.ndarray]:
        vectors = np.asarray(self.table.column("embedding").to_pylist(), dtype=np.float32)
        return dict(zip(self.ids, vectors, strict=True))


@pytest.fixture
def read_output():
    return EmbedOutput
