"""Embed outputs of the version before issue 16, whose dead letters sit in ``errors/`` (now
``_errors/``): still ours for ``--overwrite`` and for clearing a killed run, still read by dedup.

Such an output is made by publishing one with this version and renaming its dead-letter folder
back, in the files and in the manifest: the previous version wrote exactly that.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from output_folders_helpers import texts
from sbert_pipeline.dedup.sources import embed_error_ids
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.output_dir import MANIFEST, OutputExistsError
from sbert_pipeline.io.schemas import ERRORS_DIR, LEGACY_ERRORS_DIRS

from tests.stage_commands import embed

(PREVIOUS_DIR,) = LEGACY_ERRORS_DIRS
REJECTED_IDS = {"blank", "textless"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    rows = [{"id": f"t{n:02d}", "text": text} for n, text in enumerate(texts(20))]
    rows += [{"id": "blank", "text": ""}, {"id": "textless"}]
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def argv(corpus: Path, out: Path, model: Path, *extra: str) -> list[str]:
    options = ["--input", str(corpus), "--output", str(out), "--model", str(model)]
    return [*options, "--id-field", "id", *extra]


def as_previous_version(folder: Path) -> None:
    """Rename ``_errors/`` to ``errors/`` on disk and in the manifest's file list."""
    (folder / ERRORS_DIR).rename(folder / PREVIOUS_DIR)
    manifest = json.loads((folder / MANIFEST).read_text())
    commit = manifest["commit"]
    commit["datasets"] = [PREVIOUS_DIR if d == ERRORS_DIR else d for d in commit["datasets"]]
    for entry in commit["files"]:
        if entry["path"].startswith(f"{ERRORS_DIR}/"):
            entry["path"] = PREVIOUS_DIR + entry["path"].removeprefix(ERRORS_DIR)
    (folder / MANIFEST).write_text(json.dumps(manifest))


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def listed(folder: Path) -> set[str]:
    manifest = json.loads((folder / MANIFEST).read_text())
    return {entry["path"] for entry in manifest["commit"]["files"]}


@pytest.fixture(scope="module")
def previous(tmp_path_factory, corpus, tiny_st_dir) -> Path:
    """A complete embed output as the previous version left it (tests must not change it)."""
    folder = tmp_path_factory.mktemp("previous") / "emb"
    embed(argv(corpus, folder, tiny_st_dir))
    as_previous_version(folder)
    assert any(name.startswith(f"{PREVIOUS_DIR}/part-") for name in files(folder))
    return folder


def test_the_previous_versions_output_opens_and_dedup_reads_its_dead_letters(previous):
    dataset = EmbeddingsDataset.open(str(previous))  # its manifest still matches its files
    assert dataset.count == 20
    assert embed_error_ids([dataset]) == REJECTED_IDS


def test_a_rerun_sees_the_previous_versions_output_as_a_complete_output_of_ours(
    previous, corpus, tiny_st_dir
):
    before = files(previous)
    with pytest.raises(OutputExistsError, match="already holds a complete output"):
        embed(argv(corpus, previous, tiny_st_dir))
    assert files(previous) == before


def test_overwrite_replaces_the_previous_versions_output_whole(
    previous, tmp_path, corpus, tiny_st_dir, caplog
):
    folder = tmp_path / "emb"
    shutil.copytree(previous, folder)
    embed(argv(corpus, folder, tiny_st_dir, "--overwrite"))
    assert "did not write" not in caplog.text  # nothing of it was taken for a stranger's file
    assert not (folder / PREVIOUS_DIR).exists()
    assert files(folder) == listed(folder) | {MANIFEST}
    assert any(name.startswith(f"{ERRORS_DIR}/part-") for name in listed(folder))
    # and dedup reads this version's dead letters
    assert embed_error_ids([EmbeddingsDataset.open(str(folder))]) == REJECTED_IDS


def test_a_killed_run_of_the_previous_version_is_cleared_without_overwrite(
    tmp_path, corpus, tiny_st_dir
):
    folder = tmp_path / "out"
    killed = "0123456789ab"
    (folder / PREVIOUS_DIR).mkdir(parents=True)
    (folder / "_STARTED").write_text(json.dumps({"run_id": killed, "pid": 1}))
    (folder / f"part-{killed}-00000-of-00001.parquet").write_bytes(b"moved before the kill")
    (folder / PREVIOUS_DIR / f"part-{killed}-00000-of-00001.parquet").write_bytes(b"moved too")
    embed(argv(corpus, folder, tiny_st_dir))  # no --overwrite needed: all of it is ours
    assert files(folder) == listed(folder) | {MANIFEST}
    assert not (folder / PREVIOUS_DIR).exists()
