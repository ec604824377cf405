"""Item 5 of issue 25: any legal file name either works or is refused in one line naming it.

An input named with glob characters (``notes [v2].txt``) once made embed fail *after*
publishing: its read-ledger entry was named after it, and deleting that entry handed the name
to Beam, which read it as a pattern and found nothing to delete. A name that is not UTF-8
failed with an encoding error naming no file, after ``_STARTED`` was written.
"""

from __future__ import annotations

import os

import pytest
from apache_beam.io.filesystem import BeamIOError
from output_folders_helpers import embed_argv, snapshot, texts
from sbert_pipeline.io.corpus_files import refuse_unrecordable_names
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.io.staged_output import StagedOutput
from sbert_pipeline.jobs.cli import main as cli
from sbert_pipeline.jobs.run import run as run_job

from sbert_core.errors import DataFileError
from tests.stage_commands import embed

BRACKETS = "notes [v2].txt"
LATIN1 = os.fsdecode(b"caf\xe9.txt")  # b"\xe9" alone is no UTF-8: a lone surrogate in Python


def _corpus(folder, name: str, lines: list[str]):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _ids(out) -> list[str]:
    """The ids of a published embed output, opened as readers open it (manifest checked)."""
    ids, _ = EmbeddingsDataset.open(str(out)).load()
    return sorted(ids)


@pytest.fixture
def bracketed(tmp_path):
    """``in/notes [v2].txt`` (12 rows) beside ``in/plain.txt`` (3 rows)."""
    _corpus(tmp_path / "in", BRACKETS, texts(12))
    _corpus(tmp_path / "in", "plain.txt", texts(3, offset=12))
    return tmp_path / "in"


def test_a_name_with_glob_characters_embeds_and_reruns(tmp_path, bracketed, tiny_st_dir):
    out = tmp_path / "out"
    argv = embed_argv(bracketed / "*.txt", out, tiny_st_dir)
    summary = embed(argv)
    assert (summary.read, summary.embedded, summary.rejected) == (15, 15, 0)
    assert f"{BRACKETS}:1" in _ids(out) and len(_ids(out)) == 15
    assert not (out / "_attempts").exists()  # the ledger entry was deleted as written
    published = snapshot(out)

    with pytest.raises(OutputExistsError, match="already holds a complete output"):
        embed(argv)
    assert snapshot(out) == published

    again = embed([*argv, "--overwrite"])
    assert (again.read, again.embedded) == (15, 15)
    assert _ids(out) == sorted([f"{BRACKETS}:{i}" for i in range(1, 13)] + _plain_ids())
    assert not (out / "_attempts").exists()


def _plain_ids() -> list[str]:
    return [f"plain.txt:{i}" for i in range(1, 4)]


def test_the_cli_exit_status_is_zero_for_a_name_with_glob_characters(
    tmp_path, bracketed, tiny_st_dir, capsys
):
    out = tmp_path / "out"
    argv = ["embed", *embed_argv(bracketed / "*.txt", out, tiny_st_dir)]
    assert cli(argv) == 0
    assert cli([*argv, "--overwrite"]) == 0
    assert "Delete operation failed" not in capsys.readouterr().err
    assert len(_ids(out)) == 15


def test_a_file_named_with_glob_characters_is_read_as_named(tmp_path, bracketed, tiny_st_dir):
    (bracketed / "notes v.txt").write_text("what [v2] would match as a pattern\n")
    out = tmp_path / "out"
    summary = embed(embed_argv(bracketed / BRACKETS, out, tiny_st_dir))
    assert summary.read == 12
    assert _ids(out) == sorted(f"{BRACKETS}:{i}" for i in range(1, 13))


def test_sbert_run_embeds_a_name_with_glob_characters_and_reruns(tmp_path, bracketed, tiny_st_dir):
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput:\n  path: {bracketed / '*.txt'}\n"
        f"model: {tiny_st_dir}\nstages: [embed]\n",
        encoding="utf-8",
    )
    first = run_job([str(config)])
    assert first.failed is None and len(_ids(tmp_path / "job" / "embeddings")) == 15
    assert run_job([str(config), "--force", "embed"]).failed is None
    assert len(_ids(tmp_path / "job" / "embeddings")) == 15


def test_the_name_check_refuses_a_non_utf8_name_on_any_filesystem():
    # The end-to-end tests below need a filesystem that stores such a name; this one does not.
    refuse_unrecordable_names(["in/plain.txt"])  # a UTF-8 name passes
    with pytest.raises(DataFileError, match=r"b'in/caf\\xe9\.txt': its name is not valid UTF-8"):
        refuse_unrecordable_names(["in/plain.txt", f"in/{LATIN1}"])


@pytest.fixture
def latin1(tmp_path):
    """``in/caf\\xe9.txt`` (a Latin-1 name) beside ``in/plain.txt``."""
    folder = tmp_path / "in"
    _corpus(folder, "plain.txt", texts(3))
    try:
        _corpus(folder, LATIN1, texts(4, offset=3))
    except (OSError, UnicodeEncodeError):
        pytest.skip("this filesystem refuses a file name that is not UTF-8")
    return folder


def test_a_name_that_is_not_utf8_is_refused_naming_it_before_anything_is_written(
    tmp_path, latin1, tiny_st_dir
):
    out = tmp_path / "out"
    before = snapshot(tmp_path)
    with pytest.raises(DataFileError) as refused:
        embed(embed_argv(latin1 / "*.txt", out, tiny_st_dir))
    message = str(refused.value)
    assert "\n" not in message
    assert repr(os.fsencode(str(latin1 / LATIN1))) in message  # b'.../caf\xe9.txt'
    assert not out.exists()  # no _STARTED, nothing
    assert snapshot(tmp_path) == before


def test_a_name_that_is_not_utf8_leaves_the_previous_output_as_it_was(
    tmp_path, latin1, tiny_st_dir, capsys
):
    out = tmp_path / "out"
    embed(embed_argv(latin1 / "plain.txt", out, tiny_st_dir))
    published = snapshot(out)
    argv = ["embed", *embed_argv(latin1 / "*.txt", out, tiny_st_dir, "--overwrite")]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "caf\\xe9.txt" in err and "not valid UTF-8" in err
    assert snapshot(out) == published
    assert _ids(out) == _plain_ids()


def test_sbert_run_refuses_a_name_that_is_not_utf8_before_the_job_dir(
    tmp_path, latin1, tiny_st_dir
):
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput:\n  path: {latin1 / '*.txt'}\n"
        f"model: {tiny_st_dir}\nstages: [embed]\n",
        encoding="utf-8",
    )
    with pytest.raises(DataFileError, match=r"caf\\xe9\.txt'?: its name is not valid UTF-8"):
        run_job([str(config)])
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("name", ["out [1]", "out*", "out?"])
def test_an_output_name_with_glob_characters_is_refused_before_anything(
    tmp_path, bracketed, tiny_st_dir, name
):
    # Beam's Parquet writer moves its temporary files with patterns made from the folder name.
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match=r"--output: .* holds the glob character"):
        embed(embed_argv(bracketed / "*.txt", tmp_path / name, tiny_st_dir))
    assert snapshot(tmp_path) == before and not (tmp_path / name).exists()


def test_a_failure_after_publishing_still_reports_success(
    tmp_path, bracketed, tiny_st_dir, monkeypatch, caplog
):
    committed = StagedOutput.commit

    def commit_then_fail(self, manifest):
        committed(self, manifest)
        raise OSError("clearing up failed")

    monkeypatch.setattr(StagedOutput, "commit", commit_then_fail)
    out = tmp_path / "out"
    summary = embed(embed_argv(bracketed / "*.txt", out, tiny_st_dir))
    assert summary.embedded == 15 and len(_ids(out)) == 15
    assert "was published, but clearing up after it failed" in caplog.text


def test_local_paths_with_glob_characters_are_deleted_and_matched_as_written(tmp_path):
    for name in ("a[1].json", "a1.json", "q?.json", "qx.json"):
        (tmp_path / name).write_text(name)
    (tmp_path / "d [1]").mkdir()
    (tmp_path / "d [1]" / "x.json").write_text("x")
    (tmp_path / "back\\slash.json").write_text("b")

    def found(pattern: str) -> list[str]:
        matched = FileSystems.match([str(tmp_path / pattern)])[0].metadata_list
        return sorted(os.path.relpath(m.path, tmp_path) for m in matched)

    assert found("a[1].json") == ["a[1].json"]  # the file named so, not a1.json
    assert found("a[12].json") == ["a1.json"]  # no such file: a pattern, as Beam reads it
    assert found("d [1]/*.json") == ["d [1]/x.json"]
    assert "back\\slash.json" in found("*.json")
    FileSystems.delete([str(tmp_path / "a[1].json")])
    FileSystems.delete([str(tmp_path / "q?.json")])
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [
        "a1.json",
        "back\\slash.json",
        "qx.json",
    ]
    with pytest.raises(BeamIOError, match="No files found"):
        FileSystems.delete([str(tmp_path / "a[1].json")])  # gone: never a1.json instead
    assert (tmp_path / "a1.json").exists()
