"""io/atomic.py: files appear whole, a failed write leaves the old file and no temporary."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.io import atomic
from sbert_pipeline.io.atomic import (
    StagedFiles,
    local_replacing,
    replace,
    staging_path,
    write_bytes_replacing,
    write_json_replacing,
    write_parquet_replacing,
    write_text_replacing,
)
from sbert_pipeline.io.output_dir import MANIFEST, OutputLayout

SCHEMA = pa.schema([("id", pa.string())])


def _table(*ids: str) -> pa.Table:
    return pa.table({"id": list(ids)}, schema=SCHEMA)


def test_writes_replace_the_old_file_and_leave_no_temporary(tmp_path):
    path = tmp_path / "deep" / "state.json"
    write_json_replacing(str(path), {"a": 1})
    write_json_replacing(str(path), {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert path.read_text().endswith("\n")
    write_text_replacing(str(tmp_path / "hits.tsv"), "a\tb\r\n")  # written as given
    assert (tmp_path / "hits.tsv").read_bytes() == b"a\tb\r\n"
    write_bytes_replacing(str(tmp_path / "x.bin"), b"\x00\x01")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "hits.tsv", "x.bin"]
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["state.json"]
    assert (path.stat().st_mode & 0o777) == 0o644  # not mkstemp's private 0o600


def test_a_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    write_json_replacing(str(path), {"old": True})

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_json_replacing(str(path), {"new": True})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_local_replacing_publishes_only_on_success(tmp_path):
    path = tmp_path / "out.npy"
    with pytest.raises(RuntimeError), local_replacing(str(path)) as tmp:
        Path(tmp).write_bytes(b"half")
        raise RuntimeError("encoder crashed")
    assert list(tmp_path.iterdir()) == []
    with local_replacing(str(path)) as tmp:
        Path(tmp).write_bytes(b"whole")
    assert path.read_bytes() == b"whole"


def test_a_manifest_temporary_is_a_name_output_folders_own(tmp_path, monkeypatch):
    """A kill between write and rename leaves ``._manifest.json.*.tmp``, which the next run
    recognises as its own and clears (OutputLayout.owns)."""
    seen = []
    real_replace = atomic.os.replace

    def spy(source, target):
        seen.append(source)
        real_replace(source, target)

    monkeypatch.setattr(atomic.os, "replace", spy)
    write_json_replacing(str(tmp_path / MANIFEST), {})
    relative = seen[0].rsplit("/", 1)[1]
    assert OutputLayout().owns(relative), relative


def test_staging_path_and_replace(tmp_path):
    final = str(tmp_path / "sub" / "part-0.parquet")
    staging = staging_path(final)
    assert staging.startswith(final + ".") and staging.endswith(".tmp") and staging != final
    (tmp_path / "sub").mkdir()
    Path(staging).write_bytes(b"new")
    Path(final).write_bytes(b"old")
    replace(staging, final)
    assert Path(final).read_bytes() == b"new" and len(list((tmp_path / "sub").iterdir())) == 1


def test_parquet_replacing_counts_rows_and_writes_an_empty_file_for_no_tables(tmp_path):
    path = str(tmp_path / "part.parquet")
    assert write_parquet_replacing(path, iter([_table("a", "b"), _table("c")]), SCHEMA) == 3
    assert write_parquet_replacing(path, iter([_table("d")]), SCHEMA) == 1  # a retry replaces
    assert pq.read_table(path)["id"].to_pylist() == ["d"]
    assert write_parquet_replacing(path, iter([]), SCHEMA) == 0
    empty = pq.read_table(path)
    assert empty.num_rows == 0 and empty.schema.equals(SCHEMA)
    assert [p.name for p in tmp_path.iterdir()] == ["part.parquet"]


def test_staged_files_publish_together_or_not_at_all(tmp_path):
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    files = StagedFiles(SCHEMA)
    files.write(b, _table("1"))
    files.write(a, _table("2"))
    files.write(b, _table("3"))
    assert list(tmp_path.iterdir()) != [] and not (tmp_path / "a.parquet").exists()
    assert files.close() == [a, b] and files.rows == 3
    assert pq.read_table(b)["id"].to_pylist() == ["1", "3"]

    with pytest.raises(ValueError), StagedFiles(SCHEMA) as failed:
        failed.write(a, _table("x"))
        raise ValueError("worker died")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.parquet", "b.parquet"]
    assert pq.read_table(a)["id"].to_pylist() == ["2"]  # the failed attempt published nothing
