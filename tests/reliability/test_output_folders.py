"""Item 1 of issue 13: a stage never deletes what it did not write.

A folder is the remains of our own killed run only when its top level holds ``_STARTED`` with a
run id; even then only files the stage writes are removed, by name.
"""

from __future__ import annotations

import json
import logging

import pytest
from output_folders_helpers import CORPUS_TEXTS, embed_argv, snapshot
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.output_dir import OutputExistsError

from tests.stage_commands import embed, index


def _user_folder(path):
    """The reproduction: a thesis and a nested ``_STARTED`` somebody made."""
    (path / "notes").mkdir(parents=True)
    (path / "thesis.md").write_text("mine")
    (path / "notes" / "_STARTED").write_text("")
    return snapshot(path)


def test_embed_refuses_a_user_folder_with_a_nested_started_marker(tmp_path, corpus, tiny_st_dir):
    folder = tmp_path / "D"
    before = _user_folder(folder)
    with pytest.raises(OutputExistsError, match=r"D holds .*notes/_STARTED.*--overwrite"):
        embed(embed_argv(corpus, folder, tiny_st_dir))
    assert snapshot(folder) == before
    assert sorted(p.name for p in folder.iterdir()) == ["notes", "thesis.md"]


def test_index_refuses_a_user_folder_with_a_nested_started_marker(tmp_path, embedded):
    folder = tmp_path / "D"
    before = _user_folder(folder)
    with pytest.raises(OutputExistsError, match=r"D holds .*notes/_STARTED"):
        index(["--embeddings", str(embedded), "--output", str(folder), "--factory", "Flat"])
    assert snapshot(folder) == before


def test_overwrite_writes_next_to_foreign_files_and_never_deletes_them(
    tmp_path, corpus, tiny_st_dir, caplog
):
    folder = tmp_path / "D"
    _user_folder(folder)
    with caplog.at_level(logging.WARNING, logger="sbert_pipeline.io.output_dir"):
        embed(embed_argv(corpus, folder, tiny_st_dir, "--overwrite"))
    assert "did not write" in caplog.text and "left as they are" in caplog.text
    first_parts = sorted(p.name for p in folder.glob("part-*.parquet"))
    embed(embed_argv(corpus, folder, tiny_st_dir, "--overwrite"))  # replaces only our output
    assert (folder / "thesis.md").read_text() == "mine"
    assert (folder / "notes" / "_STARTED").exists()
    parts = sorted(p.name for p in folder.glob("part-*.parquet"))
    assert parts and not set(parts) & set(first_parts)  # the first run's parts are gone
    assert EmbeddingsDataset.open(str(folder)).count == CORPUS_TEXTS


def test_a_killed_runs_remains_are_cleared_by_name(tmp_path, corpus, tiny_st_dir):
    folder = tmp_path / "out"
    killed = "0123456789ab"
    (folder / "_attempts" / killed / "errors").mkdir(parents=True)
    (folder / "_STARTED").write_text(json.dumps({"run_id": killed, "pid": 1}))
    (folder / "_attempts" / killed / "part-00000-of-00001.parquet").write_bytes(b"half")
    (folder / "_attempts" / killed / "errors" / "part-00000-of-00001.parquet").write_bytes(b"x")
    (folder / f"part-{killed}-00000-of-00001.parquet").write_bytes(b"moved before the kill")
    embed(embed_argv(corpus, folder, tiny_st_dir))  # no --overwrite needed
    manifest = json.loads((folder / "_manifest.json").read_text())
    listed = {entry["path"] for entry in manifest["commit"]["files"]}
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    assert on_disk == listed | {"_manifest.json"}
    assert not (folder / "_attempts").exists() and not (folder / "_STARTED").exists()


def test_a_started_marker_without_a_run_id_is_not_ours(tmp_path, corpus, tiny_st_dir):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "_STARTED").write_text("")
    (folder / "part-00000-of-00001.parquet").write_bytes(b"somebody's parquet")
    before = snapshot(folder)
    with pytest.raises(OutputExistsError, match=r"part-00000-of-00001\.parquet.*--overwrite"):
        embed(embed_argv(corpus, folder, tiny_st_dir))
    assert snapshot(folder) == before
