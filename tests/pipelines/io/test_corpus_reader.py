import gzip
import io

import pytest
from corpus_files import GOOD_TEXTS, write_bad_jsonl, write_corpus
from sbert_pipeline.io.corpus_reader import CorpusRecord, CorpusSpec, RejectedRow, read_corpus_file


def _read(path, spec, id_prefix="corpus"):
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return list(read_corpus_file(io.BytesIO(data), str(path), spec, id_prefix))


# Parquet compresses internally; .parquet.gz is not a format anyone writes.
FORMATS = [(fmt, gz) for fmt in ("txt", "jsonl", "csv", "tsv") for gz in (False, True)]


@pytest.mark.parametrize(("fmt", "gz"), [*FORMATS, ("parquet", False)])
def test_every_format_reads_every_text(tmp_path, fmt, gz):
    path = write_corpus(tmp_path, fmt, GOOD_TEXTS, gz=gz)
    items = _read(path, CorpusSpec())
    assert all(isinstance(item, CorpusRecord) for item in items)
    assert [item.text for item in items] == GOOD_TEXTS
    assert [item.id for item in items] == [f"corpus:{row}" for row in range(1, len(GOOD_TEXTS) + 1)]
    assert items[2].source == f"{path}:3"


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "tsv", "parquet"])
def test_id_field_and_kept_fields(tmp_path, fmt):
    path = write_corpus(tmp_path, fmt, GOOD_TEXTS)
    items = _read(path, CorpusSpec(id_field="id", keep_fields=("lang", "absent")))
    assert [item.id for item in items] == [f"t{i}" for i in range(len(GOOD_TEXTS))]
    assert items[0].fields == (("lang", "en"), ("absent", None))


def test_bad_rows_are_rejected_with_reasons(tmp_path):
    path, good, n_bad = write_bad_jsonl(tmp_path)
    items = _read(path, CorpusSpec(id_field="id"))
    records = [item for item in items if isinstance(item, CorpusRecord)]
    rejected = [item for item in items if isinstance(item, RejectedRow)]
    # The duplicate id is caught later, by the pipeline: the reader alone cannot see it.
    assert {r.id for r in records} == good
    assert len(rejected) == n_bad - 1
    reasons = {r.source.rsplit(":", 1)[1]: r.reason for r in rejected}
    assert reasons["2"] == "empty text"
    assert reasons["3"] == "whitespace-only text"
    assert reasons["4"].startswith("null text")
    assert reasons["5"] == "non-string text in 'text' (int)"
    assert reasons["6"].startswith("undecodable bytes")
    assert reasons["8"].startswith("malformed JSON")
    assert reasons["9"] == "missing field 'text'"
    assert reasons["10"] == "JSON line is not an object"
    assert reasons["12"] == "missing id field 'id'"
    assert reasons["13"].startswith("malformed JSON")  # the blank line
    undecodable = next(r for r in rejected if r.reason.startswith("undecodable"))
    assert "\\xe9" in undecodable.excerpt  # the offending byte is shown, escaped
    assert len(next(r for r in records if r.id == "g3").text) == 1_000_000


def test_csv_rows_with_wrong_field_count(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text('id,text\n1,fine\n2,too,many\n3\n4,"quoted, with comma"\n')
    items = _read(path, CorpusSpec(id_field="id"))
    assert [(type(i).__name__, i.id) for i in items] == [
        ("CorpusRecord", "1"),
        ("RejectedRow", None),
        ("RejectedRow", None),
        ("CorpusRecord", "4"),
    ]
    assert items[1].reason == "malformed CSV row: 3 fields, header has 2"
    assert items[3].text == "quoted, with comma"


def test_txt_blank_lines_are_rejected_not_dropped(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("one\n\ntwo\r\n")
    items = _read(path, CorpusSpec())
    assert [getattr(i, "text", None) for i in items] == ["one", None, "two"]
    assert items[1].reason == "empty text"


def test_record_size_limit(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("short\n" + "x" * 5000 + "\n")
    items = _read(path, CorpusSpec(max_record_bytes=1000))
    assert isinstance(items[0], CorpusRecord)
    assert "1000-byte limit" in items[1].reason
