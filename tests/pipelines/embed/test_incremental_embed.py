"""Issue 28 item 1: ``sbert embed --incremental`` keeps the rows of unchanged input files,
embeds new and changed ones, drops removed ones, and publishes what a from-scratch embed of the
same files publishes (pipelines/embed/incremental.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from corpus_files import GOOD_TEXTS
from sbert_pipeline.io.embeddings_versions import compare_versions
from sbert_pipeline.io.output_dir import OutputExistsError, read_manifest
from sbert_pipeline.io.previous_output import NOT_ASKED
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.stage_api.options import OptionError

from tests.stage_commands import embed

TEXTS = [f"{text} number {i}" for i, text in enumerate(GOOD_TEXTS * 3)]


def _write(folder: Path, name: str, rows: list[tuple[str, str]]) -> Path:
    """A JSONL file of ``(id, text)`` rows (an empty text is a rejected row)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in rows))
    return path


def _rows(name: str, start: int, n: int) -> list[tuple[str, str]]:
    return [(f"{name}{i}", TEXTS[(start + i) % len(TEXTS)]) for i in range(n)]


def _embed(corpus: Path, out: Path, model: Path, *extra: str):
    argv = ["--input", str(corpus / "*.jsonl"), "--output", str(out), "--model", str(model)]
    return embed([*argv, "--id-field", "id", "--min-batch-size", "4", *extra])


def _published(out: Path) -> tuple[dict, dict[str, np.ndarray], list[tuple]]:
    """The manifest, ``{id: vector}`` of the listed parts, and the dead letters (sorted)."""
    manifest = read_manifest(str(out))
    table = pq.read_table([out / name for name in manifest["shards"]])
    vectors = np.asarray(table.column("embedding").to_pylist(), np.float32)
    by_id = dict(zip(table.column("id").to_pylist(), vectors, strict=True))
    assert len(by_id) == table.num_rows  # ids unique
    errors = [
        entry["path"]
        for entry in manifest["commit"]["files"]
        if entry["path"].startswith(f"{ERRORS_DIR}/")
    ]
    dead = pq.read_table([out / name for name in errors]) if errors else None
    letters = (
        []
        if dead is None
        else sorted(
            zip(*(dead.column(c).to_pylist() for c in ("id", "source", "reason")), strict=True)
        )
    )
    return manifest, by_id, letters


def _same_as_scratch(tmp_path: Path, corpus: Path, out: Path, model: Path) -> dict:
    """Check ``out`` against a from-scratch incremental-capable embed of ``corpus``."""
    scratch = tmp_path / f"scratch-{len(list(tmp_path.glob('scratch-*')))}"
    _embed(corpus, scratch, model, "--incremental")
    manifest, vectors, letters = _published(out)
    expected_manifest, expected, expected_letters = _published(scratch)
    assert expected_manifest["incremental"] == {
        "mode": "full",
        "reason": "no previous version",
        "resumed": [],
        "seconds": expected_manifest["incremental"]["seconds"],
    }
    assert sorted(vectors) == sorted(expected)
    for row_id, vector in expected.items():
        np.testing.assert_allclose(vectors[row_id], vector, atol=1e-5)
    assert [(i, s) for i, s, _ in letters] == [(i, s) for i, s, _ in expected_letters]
    assert manifest["counts"] == expected_manifest["counts"]
    by_path = {e["path"]: e for e in manifest["input"]["files"]}
    for entry in expected_manifest["input"]["files"]:
        got = by_path.pop(entry["path"])
        for name in ("rows", "embedded", "rejected", "sha256", "bytes", "counts"):
            assert got[name] == entry[name], (entry["path"], name)
        assert got["rows"] == got["embedded"] + got["rejected"]
    assert not by_path
    counts = manifest["counts"]
    assert counts["read"] == counts["embedded"] + counts["rejected"]
    assert counts["embedded"] == sum(
        e["rows"] for e in manifest["commit"]["files"] if "/" not in e["path"]
    )
    return manifest


@pytest.fixture
def yesterday(tmp_path, tiny_st_dir):
    """Three files (one with a rejected row) embedded with ``--incremental``."""
    corpus = tmp_path / "in"
    _write(corpus, "a", _rows("a", 0, 5))
    _write(corpus, "b", [*_rows("b", 5, 4), ("b-empty", "")])
    _write(corpus, "c", _rows("c", 9, 6))
    out = tmp_path / "out"
    summary = _embed(corpus, out, tiny_st_dir, "--incremental")
    assert (summary.read, summary.embedded, summary.rejected) == (16, 15, 1)
    return corpus, out


def _part_bytes(out: Path, manifest: dict, path: str) -> dict[str, bytes]:
    entry = next(e for e in manifest["input"]["files"] if e["path"] == path)
    return {name: (out / name).read_bytes() for name in [*entry["parts"], *entry["error_parts"]]}


def test_appended_changed_and_removed_files(tmp_path, tiny_st_dir, yesterday):
    corpus, out = yesterday
    before = read_manifest(str(out))
    a, b = str(corpus / "a.jsonl"), str(corpus / "b.jsonl")
    kept_bytes = {path: _part_bytes(out, before, path) for path in (a, b)}
    _write(corpus, "d", _rows("d", 20, 7))  # appended
    _write(corpus, "c", _rows("c", 9, 3) + _rows("cc", 30, 2))  # changed
    summary = _embed(corpus, out, tiny_st_dir, "--incremental")  # no --overwrite needed
    manifest = _same_as_scratch(tmp_path, corpus, out, tiny_st_dir)
    section = manifest["incremental"]
    assert section["mode"] == "incremental"
    assert section["reused"] == [a, b]
    assert section["recomputed"] == [str(corpus / "c.jsonl"), str(corpus / "d.jsonl")]
    assert section["removed"] == []
    assert (section["rows_old"], section["rows_new"], section["rows_gone"]) == (9, 12, 6)
    assert section["previous_created"] == before["created"]
    assert (summary.read, summary.embedded, summary.rejected) == (22, 21, 1)
    # The line counts what this run embedded, apart from the rows it kept.
    assert summary.line().startswith("22 rows, 9 kept from unchanged files: 12 embedded")
    # The unchanged files' parts are the same files: same names, bytes and digests.
    for path in (a, b):
        assert _part_bytes(out, manifest, path) == kept_bytes[path]
    changes = compare_versions(before, manifest)
    kept_parts = {
        name for e in before["input"]["files"] if e["path"] in (a, b) for name in e["parts"]
    }
    assert changes.unchanged == kept_parts
    assert changes.gone == {
        name
        for e in before["input"]["files"]
        if e["path"].endswith("c.jsonl")
        for name in e["parts"]
    }

    # Removed: b goes, with its rows and its dead letter.
    (corpus / "b.jsonl").unlink()
    previous = manifest
    _embed(corpus, out, tiny_st_dir, "--incremental")
    manifest = _same_as_scratch(tmp_path, corpus, out, tiny_st_dir)
    assert manifest["incremental"]["removed"] == [b]
    assert manifest["incremental"]["rows_gone"] == 4
    assert manifest["incremental"]["recomputed"] == []
    present = {str(p.relative_to(out)) for p in out.rglob("*")}
    assert (
        not {
            name
            for e in previous["input"]["files"]
            if e["path"] == b
            for name in [*e["parts"], *e["error_parts"]]
        }
        & present
    )
    changes = compare_versions(previous, manifest)
    assert changes.new == set() and changes.unchanged == set(manifest["shards"])


def test_changed_model_embeds_everything_again(tmp_path, tiny_st_dir, yesterday):
    corpus, out = yesterday
    other = tmp_path / "other-model"
    shutil.copytree(tiny_st_dir, other)  # the same weights under another id
    before = read_manifest(str(out))
    _embed(corpus, out, other, "--incremental")
    manifest = _same_as_scratch(tmp_path, corpus, out, other)
    assert not compare_versions(before, manifest).unchanged  # every part is new
    assert manifest["incremental"]["mode"] == "full"
    assert manifest["incremental"]["reason"].startswith("settings changed: ")
    assert "model_id" in manifest["incremental"]["reason"]
    assert manifest["counts"]["embedded"] == 15
    # A changed reading option (a kept field) is a full run too.
    _embed(corpus, out, other, "--incremental", "--keep-text")
    manifest = read_manifest(str(out))
    assert manifest["incremental"]["reason"] == "settings changed: keep_text"


def test_duplicate_id_across_kept_and_new_files(tmp_path, tiny_st_dir, yesterday):
    corpus, out = yesterday
    _write(corpus, "d", [("d0", "a fresh row"), ("a3", "the id of a kept row"), ("d1", "x y")])
    _embed(corpus, out, tiny_st_dir, "--incremental")
    _same_as_scratch(tmp_path, corpus, out, tiny_st_dir)  # a.jsonl sorts first: same choice
    manifest, vectors, letters = _published(out)
    d = str(corpus / "d.jsonl")
    assert (
        "a3",
        f"{d}:2",
        f"duplicate id 'a3' (already embedded from {corpus / 'a.jsonl'})",
    ) in letters
    entry = next(e for e in manifest["input"]["files"] if e["path"] == d)
    assert (entry["rows"], entry["embedded"], entry["rejected"]) == (3, 2, 1)
    assert {"d0", "d1", "a3"} <= set(vectors)
    assert manifest["counts"]["rejected"] == 2


def test_refusals(tmp_path, tiny_st_dir, yesterday):
    corpus, out = yesterday
    with pytest.raises(OptionError, match="exact-dedup"):
        _embed(corpus, tmp_path / "x", tiny_st_dir, "--incremental", "--exact-dedup")
    # A plain run still needs --overwrite; a foreign file still refuses an incremental one.
    with pytest.raises(OutputExistsError, match="--overwrite"):
        _embed(corpus, out, tiny_st_dir)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="did not write"):
        _embed(corpus, out, tiny_st_dir, "--incremental")
    # A previous version written without --incremental: a full run that says why.
    plain = tmp_path / "plain"
    _embed(corpus, plain, tiny_st_dir)
    section = read_manifest(str(plain))["incremental"]
    assert section == {"mode": "full", "reason": NOT_ASKED}
    _embed(corpus, plain, tiny_st_dir, "--incremental")
    reason = read_manifest(str(plain))["incremental"]["reason"]
    assert reason == "the previous version has no per-file parts (written without --incremental)"
