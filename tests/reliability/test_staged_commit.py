"""Item 2 of issue 13: outputs are published in one step, and readers check the manifest.

A failed, killed or refused rerun never destroys or mixes with the previous complete output.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import time

import pytest
import sbert_pipeline.io.atomic as atomic
import sbert_pipeline.io.output_dir as output_dir
import xxhash
from output_folders_helpers import embed_argv, snapshot, start_cli, texts, write_txt
from sbert_pipeline.index.files import open_index
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.output_dir import CorruptOutputError
from sbert_pipeline.stage_api.stops import JobFailedError

from tests.stage_commands import embed, index


@pytest.fixture(scope="module")
def first(tmp_path_factory, tiny_st_dir):
    """A complete embed output of 60 texts: (folder, its ids)."""
    root = tmp_path_factory.mktemp("first")
    out = root / "out"
    embed(embed_argv(write_txt(root / "in", texts(60)), out, tiny_st_dir))
    return out, sorted(EmbeddingsDataset.open(str(out)).load()[0])


def _copy(folder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    return copy


def test_the_manifest_lists_every_file_with_rows_bytes_and_sha256(first):
    out, ids = first
    manifest = json.loads((out / "_manifest.json").read_text())
    entries = manifest["commit"]["files"]
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert on_disk == {entry["path"] for entry in entries} | {"_manifest.json"}
    for entry in entries:
        data = (out / entry["path"]).read_bytes()
        assert entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
        assert entry["xxh3_128"] == xxhash.xxh3_128(data).hexdigest()
    parts = [e for e in entries if "/" not in e["path"]]
    assert sum(e["rows"] for e in parts) == manifest["counts"]["embedded"] == len(ids) == 60
    assert manifest["shards"] == sorted(e["path"] for e in parts)


def test_a_reader_refuses_an_extra_part_file_naming_it(first, tmp_path):
    copy = _copy(first[0], tmp_path)
    listed = sorted(copy.glob("part-*.parquet"))[0]
    shutil.copy(listed, copy / "part-99999-of-99999.parquet")
    with pytest.raises(CorruptOutputError, match=r"part-99999-of-99999\.parquet is not listed"):
        EmbeddingsDataset.open(str(copy))


def test_a_reader_refuses_a_missing_part_file_naming_it(first, tmp_path):
    copy = _copy(first[0], tmp_path)
    listed = sorted(copy.glob("part-*.parquet"))[0]
    listed.unlink()
    with pytest.raises(CorruptOutputError, match=rf"{listed.name} is listed .* but missing"):
        EmbeddingsDataset.open(str(copy))


def test_a_reader_refuses_a_part_of_another_size_naming_it(first, tmp_path):
    copy = _copy(first[0], tmp_path)
    listed = sorted(copy.glob("part-*.parquet"))[0]
    listed.write_bytes(listed.read_bytes()[:-10])
    with pytest.raises(CorruptOutputError, match=rf"{listed.name} is \d+ bytes but"):
        EmbeddingsDataset.open(str(copy))


@pytest.mark.parametrize("content", [b"", b'{"kind": "embeddings", '])
def test_an_empty_or_unparsable_manifest_is_named(first, tmp_path, content):
    copy = _copy(first[0], tmp_path)
    (copy / "_manifest.json").write_bytes(content)
    with pytest.raises(CorruptOutputError, match=r"_manifest\.json is (empty|not valid JSON)"):
        EmbeddingsDataset.open(str(copy))


def test_a_full_disk_at_the_manifest_write_keeps_the_previous_output(
    first, tmp_path, tiny_st_dir, monkeypatch
):
    out = _copy(first[0], tmp_path)
    before = snapshot(out)

    real_fsync = os.fsync

    def disk_full(fd):  # only the manifest's write fails (the _STARTED marker is synced too)
        if "_manifest.json" not in os.readlink(f"/proc/self/fd/{fd}"):
            return real_fsync(fd)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", disk_full)
    other = write_txt(tmp_path / "in", texts(30, offset=1000))
    with pytest.raises(OSError, match="No space left"):
        embed(embed_argv(other, out, tiny_st_dir, "--overwrite"))
    monkeypatch.undo()
    after = snapshot(out)
    assert {k: v for k, v in after.items() if not k.startswith("_attempts/")} == {
        k: v for k, v in before.items() if k != "_STARTED"
    } | {"_STARTED": after["_STARTED"]}
    assert (out / "_manifest.json").stat().st_size > 0
    assert not list(out.glob("._manifest.json.*"))
    assert sorted(EmbeddingsDataset.open(str(out)).load()[0]) == first[1]


def test_a_failed_rerun_keeps_the_previous_output(first, tmp_path, tiny_st_dir):
    out = _copy(first[0], tmp_path)
    corpus = tmp_path / "in" / "bad.jsonl"
    corpus.parent.mkdir()
    corpus.write_text('{"text": "fine"}\n{"no_text": 1}\n')
    with pytest.raises(JobFailedError, match=r"max-error-rate.*previous content .* unchanged"):
        embed(embed_argv(corpus, out, tiny_st_dir, "--overwrite", "--max-error-rate", "0.1"))
    assert sorted(EmbeddingsDataset.open(str(out)).load()[0]) == first[1]


def test_a_failed_index_commit_puts_the_previous_index_files_back(first, tmp_path, monkeypatch):
    out = tmp_path / "index"
    argv = ["--embeddings", str(first[0]), "--output", str(out), "--factory", "Flat"]
    index(argv)
    published = {k: v for k, v in snapshot(out).items()}

    def disk_full(directory, manifest):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output_dir, "write_manifest", disk_full)
    with pytest.raises(OSError, match="No space left"):
        index([*argv, "--factory", "HNSW8", "--overwrite"])
    monkeypatch.undo()
    after = {k: v for k, v in snapshot(out).items() if not k.startswith("_attempts/")}
    after.pop("_STARTED")
    assert after == published  # index.faiss and ids.parquet are the first run's, byte for byte
    assert open_index(str(out)).manifest["factory"] == "Flat"


def test_sigkill_during_a_rerun_keeps_the_previous_output(first, tmp_path, tiny_st_dir):
    out = _copy(first[0], tmp_path)
    corpus = write_txt(tmp_path / "in", texts(40_000, offset=100))
    job = start_cli(
        ["embed", *embed_argv(corpus, out, tiny_st_dir, "--overwrite")], tmp_path / "job.log"
    )
    deadline = time.monotonic() + 120
    while not (out / "_attempts").exists() and time.monotonic() < deadline:
        assert job.poll() is None, (tmp_path / "job.log").read_text()
        time.sleep(0.05)
    time.sleep(2.0)  # inside the embedding of 40,000 texts
    assert job.poll() is None, "the rerun finished before it could be killed; use more texts"
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    assert sorted(EmbeddingsDataset.open(str(out)).load()[0]) == first[1]
    embed(embed_argv(write_txt(tmp_path / "small", texts(25)), out, tiny_st_dir, "--overwrite"))
    assert EmbeddingsDataset.open(str(out)).count == 25
    assert not (out / "_attempts").exists() and not (out / "_STARTED").exists()
