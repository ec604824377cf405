"""The first records of every corpus file are checked for the text and id fields before a
model is read, and a folder given as the corpus gets the glob to use instead."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpus_files import write_corpus
from sbert_pipeline.io.corpus_fields import check_corpus_fields
from sbert_pipeline.io.corpus_files import match_corpus
from sbert_pipeline.io.corpus_reader import CorpusSpec

from sbert_core.errors import DataFileError

TEXTS = ["how do i learn to play the guitar well", "why is the sky blue", "what is beam"]


def _check(path, **spec) -> None:
    check_corpus_fields([(str(path), path.name, path.stat().st_size)], CorpusSpec(**spec))


@pytest.mark.parametrize(("fmt", "gz"), [("csv", False), ("tsv", False), ("jsonl", True)])
def test_a_missing_text_field_names_the_fields_and_the_flag(tmp_path, fmt, gz):
    path = write_corpus(tmp_path, fmt, TEXTS, gz=gz)
    _check(path, text_field="text")  # the field is there
    with pytest.raises(DataFileError) as info:
        _check(path, text_field="question")
    message = str(info.value)
    assert message.startswith(f"{path}: no text field 'question' in its ")
    assert "(fields: id, text, lang)" in message
    assert message.endswith("pass --text-field text")  # the longest values


def test_questions_csv_gets_its_text_column(tmp_path):
    path = tmp_path / "questions.csv"
    path.write_text("qid,question\n1,how are you today\n2,what is it\n")
    with pytest.raises(
        DataFileError,
        match=r"no text field 'text' in its header \(fields: qid, question\); "
        r"pass --text-field question$",
    ):
        _check(path)


def test_parquet_is_checked_from_its_schema(tmp_path):
    path = write_corpus(tmp_path, "parquet", TEXTS)
    with pytest.raises(DataFileError, match=r"in its columns \(fields: id, text, lang\); pass"):
        _check(path, text_field="body")
    with pytest.raises(DataFileError, match=r"no id field 'qid'.*pass --id-field id, or leave"):
        _check(path, id_field="qid")


def test_a_missing_id_field_is_refused_with_the_way_out(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(
        "".join(json.dumps({"qid": str(i), "text": t}) + "\n" for i, t in enumerate(TEXTS))
    )
    _check(path, id_field="qid")
    with pytest.raises(DataFileError) as info:
        _check(path, id_field="id")
    message = str(info.value)
    assert "no id field 'id' in its first 3 record(s) (fields: qid, text)" in message
    assert "pass --id-field qid, or leave --id-field out (ids are then file and row)" in message


def test_a_text_file_has_no_id_field(tmp_path):
    path = write_corpus(tmp_path, "txt", TEXTS)
    _check(path)
    with pytest.raises(DataFileError, match=r"has no fields, so --id-field id cannot be read"):
        _check(path, id_field="id")


def test_a_field_in_some_of_the_first_records_is_enough(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('not json\n{"title": "x"}\n{"text": "a text"}\n')
    _check(path)  # rows without the field are rejected one by one, as before


def test_files_the_check_cannot_read_are_left_to_the_reader(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    _check(empty)
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(gzip.compress(b'{"text": "a"}\n')[:12])
    _check(broken)
    no_rows = tmp_path / "no_rows.parquet"
    pq.write_table(
        pa.table({"a": pa.array([], pa.string()), "b": pa.array([], pa.string())}), no_rows
    )
    with pytest.raises(DataFileError, match="no text field"):
        _check(no_rows)


def test_every_file_is_checked(tmp_path):
    good = write_corpus(tmp_path, "jsonl", TEXTS, name="a")
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"body": "x"}\n')
    files = [(str(p), p.name, p.stat().st_size) for p in (good, bad)]
    with pytest.raises(DataFileError, match=r"b\.jsonl: no text field 'text'.*\(fields: body\)"):
        check_corpus_fields(files, CorpusSpec())


def test_a_folder_as_input_gets_the_glob_of_its_files(tmp_path):
    folder = tmp_path / "corpus"
    write_corpus(folder, "jsonl", TEXTS, name="a")
    write_corpus(folder, "jsonl", TEXTS, name="b")
    (folder / "README.md").write_text("notes")
    with pytest.raises(
        DataFileError, match=rf"^{folder} is a folder, not a corpus file: use {folder}/\*\.jsonl "
    ):
        match_corpus(str(folder))
    assert len(match_corpus(str(folder / "*.jsonl"))) == 2


def test_a_folder_of_several_formats_gets_each_glob(tmp_path):
    write_corpus(tmp_path / "c", "csv", TEXTS)
    write_corpus(tmp_path / "c", "jsonl", TEXTS, gz=True)
    with pytest.raises(DataFileError, match=r"use .*/c/\*\.csv or .*/c/\*\.jsonl\.gz "):
        match_corpus(str(tmp_path / "c"))


def test_a_folder_without_corpus_files_says_so(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("x")
    with pytest.raises(DataFileError, match=r"is a folder holding no corpus file"):
        match_corpus(str(tmp_path / "docs"))
