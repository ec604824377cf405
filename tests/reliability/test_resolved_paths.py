"""Item 4 of issue 25: paths compared as the OS resolves them.

"Output inside the input glob" once compared paths only as written: with ``iolink`` a link to
``io``, the input ``iolink/**.parquet`` and the output ``io/emb`` (``--overwrite``) embedded
the output's own rows again on every rerun (20 -> 40 -> 60, exit 0). And ``job_dir: /`` walked
the whole filesystem (39 s) before it was refused.
"""

from __future__ import annotations

import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from output_folders_helpers import embed_argv, snapshot, texts
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.jobs.run import run as run_job

from tests.stage_commands import embed


@pytest.fixture
def linked(tmp_path):
    """``io/corpus.parquet`` (20 rows with ids and texts) and ``iolink`` -> ``io``."""
    (tmp_path / "io").mkdir()
    table = pa.table({"id": [f"r{i}" for i in range(20)], "text": texts(20)})
    pq.write_table(table, tmp_path / "io" / "corpus.parquet")
    (tmp_path / "iolink").symlink_to("io", target_is_directory=True)
    return tmp_path


def _argv(corpus, out, model):
    return embed_argv(corpus, out, model, "--id-field", "id", "--keep-text", "--overwrite")


def test_an_input_glob_through_a_link_that_reaches_the_output_is_refused(linked, tiny_st_dir):
    out = linked / "io" / "emb"
    embed(_argv(linked / "io" / "corpus.parquet", out, tiny_st_dir))  # 20 rows, by name
    before = snapshot(linked)
    with pytest.raises(ValueError, match=r"io/emb is inside --input .*iolink/\*\*\.parquet"):
        embed(_argv(linked / "iolink" / "**.parquet", out, tiny_st_dir))
    assert snapshot(linked) == before  # the output and everything beside it unchanged
    assert EmbeddingsDataset.open(str(out)).count == 20


def test_an_output_reached_through_a_link_into_the_input_is_refused(linked, tiny_st_dir):
    before = snapshot(linked)
    with pytest.raises(ValueError, match=r"iolink/emb \(that is .*io/emb\) is inside --input"):
        embed(_argv(linked / "io" / "**.parquet", linked / "iolink" / "emb", tiny_st_dir))
    assert snapshot(linked) == before and not (linked / "io" / "emb").exists()


def test_an_input_file_that_links_into_the_output_is_refused(linked, tiny_st_dir):
    out = linked / "out"
    embed(_argv(linked / "io" / "corpus.parquet", out, tiny_st_dir))
    part = next(out.glob("part-*.parquet"))
    (linked / "io" / "previous.parquet").symlink_to(part)
    before = snapshot(linked)
    with pytest.raises(ValueError, match=r"--output .*out is inside .*already matches"):
        embed(_argv(linked / "io" / "*.parquet", out, tiny_st_dir))
    assert snapshot(linked) == before
    assert EmbeddingsDataset.open(str(out)).count == 20


@pytest.fixture
def no_walk(monkeypatch):
    """Any listing of a folder fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("listed a folder")

    for name in ("walk", "scandir", "listdir"):
        monkeypatch.setattr(os, name, refuse)


def _job(tmp_path, job_dir, tiny_st_dir):
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {job_dir}\ninput:\n  path: {tmp_path / 'in' / '*.txt'}\n"
        f"model: {tiny_st_dir}\nstages: [embed]\n",
        encoding="utf-8",
    )
    return str(config)


@pytest.mark.parametrize(
    ("where", "why"),
    [("/", "is the filesystem root"), ("~", "is your home folder"), ("..", "current directory")],
)
def test_a_job_dir_that_holds_too_much_is_refused_at_once(
    where, why, tmp_path, tiny_st_dir, monkeypatch, request
):
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    config = _job(tmp_path, os.path.expanduser(where), tiny_st_dir)
    request.getfixturevalue("no_walk")
    started = time.monotonic()
    with pytest.raises(ValueError, match=f"^job_dir: .*{why}"):
        run_job([config])
    assert time.monotonic() - started < 2


def test_a_job_dir_that_links_to_home_is_refused(tmp_path, tiny_st_dir, no_walk):
    (tmp_path / "home-link").symlink_to(os.path.expanduser("~"), target_is_directory=True)
    config = _job(tmp_path, tmp_path / "home-link", tiny_st_dir)
    with pytest.raises(ValueError, match=r"home-link \(that is .*\) is your home folder"):
        run_job([config])


@pytest.mark.parametrize("where", ["/", "~"])
def test_an_output_of_root_or_home_is_refused_before_any_listing(
    where, tmp_path, tiny_st_dir, no_walk
):
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"^--output: .*(filesystem root|your home folder)"):
        embed(embed_argv(tmp_path / "*.txt", os.path.expanduser(where), tiny_st_dir))
    assert time.monotonic() - started < 2
