"""``sbert run`` sees an input by its content: a corpus file edited in place, with its size and
modification time kept, is embedded again (as ``sbert embed --incremental`` does)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
from sbert_pipeline.io.output_dir import listed_parts, read_manifest
from sbert_pipeline.jobs.run import run


def edit_in_place(path: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` (same length) and put the size and times back."""
    assert len(old) == len(new)
    stat = path.stat()
    path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)


def embedded_texts(folder: Path) -> set[str]:
    parts = listed_parts(str(folder), read_manifest(str(folder)), "") or []
    return {text for part in parts for text in pq.read_table(part).column("text").to_pylist()}


def test_a_file_edited_with_its_size_and_time_kept_is_embedded_again(tmp_path, tiny_st_dir):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rows = [{"id": f"a{i}", "text": f"the first text number {i}"} for i in range(4)]
    (corpus / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    (corpus / "b.jsonl").write_text(json.dumps({"id": "b0", "text": "another file"}) + "\n")
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {tmp_path / 'job'}\n"
        f"input: {{path: '{corpus}/*.jsonl', id_field: id}}\n"
        f"model: {tiny_st_dir}\n"
        "incremental: true\n"
        "stages: [embed]\n",
        encoding="utf-8",
    )
    run([str(config)])
    edit_in_place(corpus / "a.jsonl", "first text number 2", "FIRST TEXT NUMBER 2")

    summary = run([str(config)])

    assert [stage.status for stage in summary.stages] == ["ran"]
    texts = embedded_texts(tmp_path / "job" / "embeddings")
    assert "the FIRST TEXT NUMBER 2" in texts and "the first text number 2" not in texts
    section = read_manifest(str(tmp_path / "job" / "embeddings"))["incremental"]
    assert section["recomputed"] == [str(corpus / "a.jsonl")]  # b.jsonl kept as it was
