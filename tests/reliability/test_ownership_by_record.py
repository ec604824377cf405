"""Items 1, 2 and 6 of issue 25: ownership by record, no writes or deletes through links, and a
refused run touches nothing.

Every test snapshots the parent of the output folder (so a change anywhere beside it shows), and
checks that the previous output still reads with the same rows.
"""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from output_folders_helpers import CORPUS_TEXTS, embed_argv, snapshot
from sbert_pipeline.index.files import open_index
from sbert_pipeline.io import staged_output
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.jobs.cli import main as cli

from tests.stage_commands import embed, index

OTHER_RUN = "fedcba987654"


def _index_argv(embedded, out, *extra):
    return ["--embeddings", str(embedded), "--output", str(out), "--factory", "Flat", *extra]


def _spark_output(folder):
    """What Spark leaves: ``_SUCCESS``, a part file and its checksum."""
    folder.mkdir(parents=True)
    (folder / "_SUCCESS").write_bytes(b"")
    table = pa.table({"id": ["a", "b"], "value": [1.0, 2.0]})
    pq.write_table(table, folder / "part-00000-1b2c.snappy.parquet")
    (folder / ".part-00000-1b2c.snappy.parquet.crc").write_bytes(b"crc")


def _user_folder(path):
    """A folder of the user's with an empty subfolder and a file."""
    (path / "keep" / "empty").mkdir(parents=True)
    (path / "keep" / "notes.txt").write_text("mine")
    return path


def _folders(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_dir())


def test_a_spark_output_is_refused_naming_every_kind_of_foreign_file(tmp_path, corpus, tiny_st_dir):
    folder = tmp_path / "spark"
    _spark_output(folder)
    before = snapshot(tmp_path)
    with pytest.raises(OutputExistsError) as refused:
        embed(embed_argv(corpus, folder, tiny_st_dir))
    message = str(refused.value)
    for name in ("_SUCCESS", "part-00000-1b2c.snappy.parquet", ".part-00000-1b2c.snappy.parquet"):
        assert name in message
    assert snapshot(tmp_path) == before


def test_overwrite_never_deletes_a_foreign_part_file_it_would_read_as_ours(
    tmp_path, corpus, tiny_st_dir, capsys
):
    folder = tmp_path / "spark"
    _spark_output(folder)
    before = snapshot(tmp_path)
    code = cli(["embed", *embed_argv(corpus, folder, tiny_st_dir, "--overwrite")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "part-00000-1b2c.snappy.parquet" in err
    assert "refused even with --overwrite" in err and "_SUCCESS" in err
    assert snapshot(tmp_path) == before  # the part file is byte-identical, nothing was added


def test_overwrite_keeps_foreign_files_that_are_not_in_the_way(tmp_path, corpus, tiny_st_dir):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / "README.txt").write_text("mine")
    embed(embed_argv(corpus, folder, tiny_st_dir, "--overwrite"))
    embed(embed_argv(corpus, folder, tiny_st_dir, "--overwrite"))
    assert (folder / "_SUCCESS").exists() and (folder / "README.txt").read_text() == "mine"
    assert EmbeddingsDataset.open(str(folder)).count == CORPUS_TEXTS


def test_a_file_named_like_our_killed_runs_part_is_not_ours_without_its_record(
    tmp_path, corpus, tiny_st_dir
):
    folder = tmp_path / "out"
    folder.mkdir()
    part = folder / f"part-{OTHER_RUN}-00000-of-00001.parquet"
    part.write_bytes(b"a user's file, named like ours")
    before = snapshot(tmp_path)
    with pytest.raises(OutputExistsError, match="refused even with --overwrite"):
        embed(embed_argv(corpus, folder, tiny_st_dir, "--overwrite"))  # no _STARTED names it
    assert snapshot(tmp_path) == before


def test_a_manifest_listing_a_file_outside_the_folder_never_makes_it_ours(
    tmp_path, embedded, corpus, tiny_st_dir
):
    folder = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("outside")
    embed(embed_argv(corpus, folder, tiny_st_dir))
    manifest = json.loads((folder / "_manifest.json").read_text())
    manifest["commit"]["files"].append({"path": "../victim.txt", "bytes": 7, "sha256": "0"})
    (folder / "_manifest.json").write_text(json.dumps(manifest))
    embed(embed_argv(corpus, folder, tiny_st_dir, "--overwrite"))
    assert victim.read_text() == "outside"


def test_started_as_a_link_to_a_users_file_is_refused_and_the_file_unchanged(tmp_path, embedded):
    out = tmp_path / "index"
    index(_index_argv(embedded, out))
    users = tmp_path / "thesis.md"
    users.write_text("my thesis")
    (out / "_STARTED").symlink_to(users)
    before = snapshot(tmp_path)
    with pytest.raises(OutputExistsError, match=r"_STARTED is a symbolic link"):
        index(_index_argv(embedded, out, "--overwrite"))
    assert snapshot(tmp_path) == before and users.read_text() == "my thesis"
    assert os.path.islink(out / "_STARTED")
    assert open_index(str(out)).manifest["factory"] == "Flat"


def test_attempts_as_a_link_to_a_users_folder_is_refused_and_its_folders_kept(tmp_path, embedded):
    out = tmp_path / "index"
    index(_index_argv(embedded, out))
    users = _user_folder(tmp_path / "users")
    folders = _folders(users)
    (out / "_attempts").symlink_to(users, target_is_directory=True)
    before = snapshot(tmp_path)
    with pytest.raises(OutputExistsError, match=r"_attempts is a symbolic link"):
        index(_index_argv(embedded, out, "--overwrite"))
    assert _folders(users) == folders and snapshot(tmp_path) == before
    assert open_index(str(out)).manifest["factory"] == "Flat"


def test_errors_as_a_link_to_a_users_folder_is_refused_before_anything_is_written(
    tmp_path, corpus, tiny_st_dir
):
    out = tmp_path / "emb"
    embed(embed_argv(corpus, out, tiny_st_dir))
    users = _user_folder(tmp_path / "users")
    (out / "_errors").rename(tmp_path / "old_errors")  # the link takes the folder's place
    (out / "_errors").symlink_to(users, target_is_directory=True)
    before = snapshot(tmp_path)
    with pytest.raises(OutputExistsError, match=r"_errors is a symbolic link"):
        embed(embed_argv(corpus, out, tiny_st_dir, "--overwrite"))
    assert snapshot(tmp_path) == before
    assert sorted(p.name for p in users.rglob("*")) == ["empty", "keep", "notes.txt"]


def test_a_link_made_while_the_run_ran_stops_the_commit_and_nothing_is_published(
    tmp_path, corpus, tiny_st_dir, monkeypatch
):
    out = tmp_path / "emb"
    embed(embed_argv(corpus, out, tiny_st_dir))
    rows = sorted(EmbeddingsDataset.open(str(out)).load()[0])
    users = _user_folder(tmp_path / "users")
    commit = staged_output.StagedOutput.commit

    def link_then_commit(self, manifest):
        (out / "_errors").rename(tmp_path / "old_errors")
        (out / "_errors").symlink_to(users, target_is_directory=True)
        return commit(self, manifest)

    monkeypatch.setattr(staged_output.StagedOutput, "commit", link_then_commit)
    with pytest.raises(OutputExistsError, match=r"became a symbolic link.*published nothing"):
        embed(embed_argv(corpus, out, tiny_st_dir, "--overwrite"))
    assert sorted(p.name for p in users.rglob("*")) == ["empty", "keep", "notes.txt"]
    (out / "_errors").unlink()
    (tmp_path / "old_errors").rename(out / "_errors")
    assert sorted(EmbeddingsDataset.open(str(out)).load()[0]) == rows


def test_a_link_of_the_users_beside_our_names_is_kept_with_overwrite(tmp_path, corpus, tiny_st_dir):
    out = tmp_path / "emb"
    users = _user_folder(tmp_path / "users")
    out.mkdir()
    (out / "notes").symlink_to(users, target_is_directory=True)
    embed(embed_argv(corpus, out, tiny_st_dir, "--overwrite"))
    embed(embed_argv(corpus, out, tiny_st_dir, "--overwrite"))
    assert os.path.islink(out / "notes") and (users / "keep" / "notes.txt").read_text() == "mine"
    assert EmbeddingsDataset.open(str(out)).count == CORPUS_TEXTS


def test_a_refused_rerun_leaves_a_stale_backup_where_it_is(tmp_path, embedded):
    out = tmp_path / "index"
    index(_index_argv(embedded, out))
    stale = out / "_attempts" / OTHER_RUN / "_previous" / "ids.parquet"
    stale.parent.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["stale"]}), stale)
    before = snapshot(tmp_path)
    with pytest.raises(OutputExistsError, match=rf"_attempts/{OTHER_RUN}/_previous/ids.parquet"):
        index(_index_argv(embedded, out))
    assert snapshot(tmp_path) == before
    assert open_index(str(out)).manifest["factory"] == "Flat"  # still complete and readable


def _killed_commit(out, embedded, *, set_aside: bool) -> bytes:
    """A complete index whose ``_STARTED`` names a killed run with a ``_previous/ids.parquet``:
    the listed file set aside (a commit killed after moving it), or a stale one; the listed
    file's bytes."""
    index(_index_argv(embedded, out))
    ids = (out / "ids.parquet").read_bytes()
    backup = out / "_attempts" / OTHER_RUN / "_previous" / "ids.parquet"
    backup.parent.mkdir(parents=True)
    if set_aside:
        (out / "ids.parquet").rename(backup)
        pq.write_table(pa.table({"id": ["new"]}), out / "ids.parquet")  # the killed run's own
    else:
        pq.write_table(pa.table({"id": ["stale"]}), backup)
    (out / "_STARTED").write_text(json.dumps({"run_id": OTHER_RUN, "pid": 1}))
    return ids


def _take(out):
    """Prepare the index folder for a run that goes on (it clears remains), and let it go."""
    staged_output.prepare_output(
        str(out), overwrite=True, job={"command": "test"}, layout=_index_layout()
    ).release()


def test_a_stale_backup_of_a_recorded_run_never_replaces_a_good_file(tmp_path, embedded):
    out = tmp_path / "index"
    ids = _killed_commit(out, embedded, set_aside=False)
    before = snapshot(tmp_path)
    with pytest.raises(OutputExistsError, match="already holds a complete output"):
        index(_index_argv(embedded, out))
    assert snapshot(tmp_path) == before  # refused: untouched
    _take(out)  # goes on: clears the run's remains, and the stale backup stays out
    assert (out / "ids.parquet").read_bytes() == ids and not (out / "_attempts").exists()
    assert open_index(str(out)).manifest["factory"] == "Flat"


def test_a_killed_commits_backup_goes_back_when_it_is_the_listed_file(tmp_path, embedded):
    out = tmp_path / "index"
    ids = _killed_commit(out, embedded, set_aside=True)
    _take(out)
    assert (out / "ids.parquet").read_bytes() == ids
    assert open_index(str(out)).manifest["factory"] == "Flat"


def _index_layout():
    from sbert_pipeline.index.stage import LAYOUT

    return LAYOUT


@pytest.mark.parametrize("where", ["/", "~"])
def test_the_root_or_home_folder_is_refused_at_once_without_a_walk(where, monkeypatch):
    def no_walk(*args, **kwargs):
        raise AssertionError("walked the filesystem")

    monkeypatch.setattr(os, "walk", no_walk)
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"the filesystem root|your home folder"):
        staged_output.prepare_output(
            os.path.expanduser(where), overwrite=True, job={"command": "test"}
        )
    assert time.monotonic() - started < 2


def test_a_local_write_never_goes_through_a_link(tmp_path):
    users = tmp_path / "thesis.md"
    users.write_text("my thesis")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "_STARTED").symlink_to(users)
    with pytest.raises(OSError, match=r"_STARTED is a symbolic link"):
        FileSystems.create(str(tmp_path / "out" / "_STARTED"))
    assert users.read_text() == "my thesis"
