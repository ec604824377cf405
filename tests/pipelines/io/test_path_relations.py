"""Where an output lies relative to an input (pipelines/io/path_relations.py): equal, inside,
above or apart, for local folders (links resolved), remote URLs and globs."""

from __future__ import annotations

import os

import pytest
from sbert_pipeline.io.path_relations import overlap_error, relation


@pytest.mark.parametrize(
    ("output", "input", "expected"),
    [
        ("out/pairs", "out/pairs", "equal"),
        ("out/pairs/", "out/./pairs", "equal"),
        ("out/pairs/v", "out/pairs", "inside"),
        ("out", "out/pairs", "above"),
        ("out/pairs2", "out/pairs", None),
        ("out/dedup", "out/pairs", None),
    ],
)
def test_local_paths(tmp_path, monkeypatch, output, input, expected):
    monkeypatch.chdir(tmp_path)
    assert relation(output, input) == expected


def test_a_link_to_an_input_is_the_input(tmp_path):
    real = tmp_path / "emb"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert relation(str(link), str(real)) == "equal"
    assert relation(str(link / "x"), str(real)) == "inside"
    message = overlap_error(str(link), "--embeddings", str(real))
    assert message is not None and f"(that is {real})" in message and "\n" not in message


@pytest.mark.parametrize(
    ("output", "input", "expected"),
    [
        ("gs://b/pairs/", "gs://b/pairs", "equal"),
        ("gs://b/pairs/v", "gs://b//pairs/", "inside"),
        ("gs://b", "gs://b/pairs", "above"),
        ("gs://b/pairs2", "gs://b/pairs", None),
        ("s3://b/pairs", "gs://b/pairs", None),
        ("out/pairs", "gs://b/pairs", None),
    ],
)
def test_remote_urls_by_name(output, input, expected):
    assert relation(output, input) == expected


@pytest.mark.parametrize(
    ("output", "pattern", "expected"),
    [
        ("data/emb", "data/*.jsonl", None),  # a sibling of the corpus files
        ("elsewhere", "data/*.jsonl", None),
        ("data", "data/*.jsonl", "above"),
        (".", "data/*.jsonl", "above"),
        ("data/out.jsonl", "data/*.jsonl", "equal"),
        ("data/emb", "data/**", "inside"),
        ("data/emb/x", "data/**/*.jsonl", "inside"),
        ("data/emb", "data/*", "equal"),
        ("data/emb", "data/*/part.jsonl", "inside"),
        ("data/emb", "data/x*/part.jsonl", None),
        ("gs://b/data/emb", "gs://b/data/*.jsonl", None),
        ("gs://b/data", "gs://b/data/*.jsonl", "above"),
        ("gs://b/data/emb", "gs://b/data/**", "inside"),
    ],
)
def test_a_glob_stands_for_the_files_it_can_match(tmp_path, monkeypatch, output, pattern, expected):
    monkeypatch.chdir(tmp_path)
    assert relation(output, pattern) == expected


def test_the_message_names_both_paths_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = overlap_error("P/pairs/v", "--pairs", "P/pairs")
    assert message == (
        "P/pairs/v is inside --pairs P/pairs: its files would mix with the input's; "
        "choose an output folder apart from every input"
    )
    assert overlap_error("P/v", "--pairs", "P/pairs") is None
    glob = overlap_error("data/a.jsonl", "--input", "data/*.jsonl")
    assert glob is not None and "is a name --input data/*.jsonl matches" in glob


def test_relative_and_absolute_spellings_meet(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert relation(os.path.join(str(tmp_path), "out"), "out") == "equal"
