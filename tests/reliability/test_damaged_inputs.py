"""Item 7 of issue 13: damaged and odd input files.

A damaged file (truncated or junk-tailed gzip/bz2, an empty or corrupt Parquet file) fails the
job with one line naming it and publishes nothing, or with ``--on-bad-file skip`` becomes one
rejected row that the ledger counts. ``.bz2`` is read like ``.gz``; a UTF-8 byte order mark is
dropped; a stray CSV quote costs one line; ``--max-record-bytes`` counts bytes; a huge text is
cut before tokenising; an output folder inside the input glob is refused before it is touched.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.io.corpus_reader import (
    CorpusRecord,
    CorpusSpec,
    DamagedFileError,
    RejectedRow,
    raw_rows,
    read_corpus_file,
)
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.jobs.cli import main as sbert

from sbert_core.errors import DataFileError
from sbert_core.inference.tokenizing import CUT_CHARS_PER_TOKEN
from sbert_core.tabular import read_table

REPO = Path(__file__).resolve().parents[2]


def _jsonl(n: int, prefix: str = "r") -> bytes:
    return "".join(
        json.dumps({"id": f"{prefix}{i}", "text": f"sentence {i} about topic {i % 7}"}) + "\n"
        for i in range(n)
    ).encode()


def _parquet_bytes(n: int) -> bytes:
    buffer = io.BytesIO()
    table = pa.table({"id": [f"p{i}" for i in range(n)], "text": [f"text {i}" for i in range(n)]})
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _damaged(kind: str) -> tuple[str, bytes]:
    """(file name, bytes) of one kind of damaged corpus file."""
    data = _jsonl(3000)
    if kind == "truncated-gz":
        packed = gzip.compress(data, mtime=0)
        return "c.jsonl.gz", packed[: len(packed) // 2]
    if kind == "junk-after-gz":
        return "c.jsonl.gz", gzip.compress(data, mtime=0) + b"junk after the member"
    if kind == "truncated-bz2":
        packed = bz2.compress(data)
        return "c.jsonl.bz2", packed[: len(packed) // 2]
    if kind == "junk-after-bz2":
        return "c.jsonl.bz2", bz2.compress(data) + b"junk after the stream"
    if kind == "empty-parquet":
        return "c.parquet", b""
    if kind == "corrupt-parquet":
        return "c.parquet", _parquet_bytes(50)[:-30]
    raise AssertionError(kind)


DAMAGE_KINDS = [
    "truncated-gz",
    "junk-after-gz",
    "truncated-bz2",
    "junk-after-bz2",
    "empty-parquet",
    "corrupt-parquet",
]


def _embed(corpus, out, model, *extra) -> list[str]:
    return ["embed", "--input", str(corpus), "--output", str(out), "--model", str(model), *extra]


def _read(path: Path, spec: CorpusSpec, data: bytes | None = None) -> list:
    stream = io.BytesIO(path.read_bytes() if data is None else data)
    return list(read_corpus_file(stream, str(path), spec, "c"))


@pytest.mark.parametrize("kind", DAMAGE_KINDS)
def test_a_damaged_file_fails_the_job_naming_it(tmp_path, tiny_st_dir, capsys, kind):
    name, data = _damaged(kind)
    corpus = tmp_path / "in" / name
    corpus.parent.mkdir()
    corpus.write_bytes(data)
    status = sbert(_embed(corpus, tmp_path / "out", tiny_st_dir, "--id-field", "id"))
    message = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert message[-1].startswith(f"sbert: error: {corpus}: damaged file, unreadable after ")
    assert "--on-bad-file skip" in message[-1]
    assert not (tmp_path / "out" / "_manifest.json").exists()


def test_a_damaged_file_prints_one_line_and_no_traceback(tmp_path, tiny_st_dir):
    name, data = _damaged("truncated-gz")
    corpus = tmp_path / name
    corpus.write_bytes(data)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sbert_pipeline.jobs.cli",
            *_embed(corpus, tmp_path / "out", tiny_st_dir),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("sbert: error:")]
    assert len(errors) == 1 and str(corpus) in errors[0]


def test_skip_turns_each_damaged_file_into_one_counted_dead_letter(tmp_path, tiny_st_dir):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "good.jsonl").write_bytes(_jsonl(40, prefix="g"))
    truncated = gzip.compress(_jsonl(3000, prefix="t"), mtime=0)
    (folder / "t.jsonl.gz").write_bytes(truncated[: len(truncated) // 2])
    (folder / "e.parquet").write_bytes(b"")
    out = tmp_path / "out"
    argv = _embed(folder / "*", out, tiny_st_dir, "--id-field", "id", "--on-bad-file", "skip")
    assert sbert(argv) == 0
    manifest = json.loads((out / "_manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["read"] == counts["embedded"] + counts["rejected"]
    files = {Path(entry["path"]).name: entry["rows"] for entry in manifest["input"]["files"]}
    errors = pq.read_table(sorted(out.glob(f"{ERRORS_DIR}/*.parquet"))).to_pylist()
    letters = {
        Path(row["source"]).name: row
        for row in errors
        if row["source"].endswith((".gz", ".parquet"))
    }
    assert set(letters) == {"t.jsonl.gz", "e.parquet"}
    assert letters["e.parquet"]["reason"].startswith("damaged file, skipped after 0 rows")
    before = int(letters["t.jsonl.gz"]["reason"].split("after ")[1].split(" rows")[0])
    assert 0 < before < 3000
    assert files == {"good.jsonl": 40, "t.jsonl.gz": before + 1, "e.parquet": 1}
    assert counts["embedded"] == 40 + before


def test_bz2_is_read_like_gz(tmp_path, tiny_st_dir):
    corpus = tmp_path / "x.jsonl.bz2"
    corpus.write_bytes(bz2.compress(_jsonl(30)))
    out = tmp_path / "out"
    assert sbert(_embed(corpus, out, tiny_st_dir, "--id-field", "id")) == 0
    assert json.loads((out / "_manifest.json").read_text())["counts"]["embedded"] == 30


def test_bz2_tables_and_damage_in_small_tables(tmp_path):
    table = tmp_path / "pairs.tsv.bz2"
    table.write_bytes(bz2.compress(b"\xef\xbb\xbfsentence1\tsentence2\nA\tB\n"))
    assert read_table(table).columns == ["sentence1", "sentence2"]
    junk = tmp_path / "junk.tsv.bz2"
    junk.write_bytes(bz2.compress(b"a\tb\n1\t2\n") + b"junk")
    with pytest.raises(DataFileError, match=r"junk\.tsv\.bz2: unreadable"):
        read_table(junk)


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv", "tsv"])
def test_a_byte_order_mark_is_dropped(tmp_path, fmt):
    texts = ["first text", "second text"]
    if fmt == "txt":
        body = "".join(t + "\n" for t in texts)
    elif fmt == "jsonl":
        body = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    else:
        sep = "," if fmt == "csv" else "\t"
        body = f"text{sep}n\n" + "".join(f"{t}{sep}{i}\n" for i, t in enumerate(texts))
    path = tmp_path / f"bom.{fmt}"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    items = _read(path, CorpusSpec())
    assert [getattr(item, "text", None) for item in items] == texts


def test_a_byte_order_mark_is_dropped_from_small_tables(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfsentence1,sentence2\nA,B\n")
    assert read_table(path).columns == ["sentence1", "sentence2"]


def _stray_quote_csv(rows: int, stray_row: int) -> str:
    """A CSV of ``rows`` rows (every 50th text quoted for its comma), one stray quote."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", "text"])
    for i in range(1, rows + 1):
        writer.writerow([f"s{i}", f"row {i}, with a comma" if i % 50 == 0 else f"row {i}"])
    lines = buffer.getvalue().splitlines(keepends=True)
    lines[stray_row] = f's{stray_row},"a stray quote opens here\n'
    return "".join(lines)


def test_a_stray_quote_costs_one_line_of_ten_thousand(tmp_path):
    path = tmp_path / "stray.csv"
    path.write_text(_stray_quote_csv(10_000, stray_row=3))
    items = _read(path, CorpusSpec(id_field="id"))
    assert len(items) == 10_000  # every physical line after the header is one row
    rejected = [item for item in items if isinstance(item, RejectedRow)]
    assert [(r.source, r.reason.split(" (")[0]) for r in rejected] == [
        (f"{path}:3", "unterminated quoted field")
    ]
    assert "reading resumed at the next line" in rejected[0].reason
    ids = {item.id for item in items if isinstance(item, CorpusRecord)}
    assert ids == {f"s{i}" for i in range(1, 10_001)} - {"s3"}


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        ("".join(f"{i},row {i}\n" for i in range(4, 2000)), "still open after 1000 lines"),
        ("".join(f"{i},row {i}\n" for i in range(4, 20)), "still open at the end of the file"),
    ],
)
def test_a_quote_left_open_is_cut_at_the_line_limit_or_the_end(tmp_path, tail, why):
    path = tmp_path / "open.csv"
    path.write_text('id,text\n1,one\n2,two\n3,"open\n' + tail)
    items = _read(path, CorpusSpec(id_field="id"))
    assert len(items) == 3 + tail.count("\n")
    rejected = [item for item in items if isinstance(item, RejectedRow)]
    assert len(rejected) == 1 and why in rejected[0].reason
    assert rejected[0].source == f"{path}:3"


def test_a_quote_past_the_byte_limit_is_cut(tmp_path):
    path = tmp_path / "open.csv"
    path.write_text('id,text\n1,"open\n' + "".join(f"{i},{'x' * 60}\n" for i in range(2, 40)))
    items = _read(path, CorpusSpec(id_field="id", max_record_bytes=500))
    assert len(items) == 39
    assert "still open after 500 bytes" in items[0].reason
    assert all(isinstance(item, CorpusRecord) for item in items[1:])


def test_a_real_multi_line_field_stays_one_row(tmp_path):
    path = tmp_path / "multi.csv"
    path.write_text('id,text\n1,"a paragraph\nthat goes on\nfor three lines"\n2,next\n')
    items = _read(path, CorpusSpec(id_field="id"))
    assert [(item.id, item.text) for item in items] == [
        ("1", "a paragraph\nthat goes on\nfor three lines"),
        ("2", "next"),
    ]


def test_an_unreadable_csv_header_is_a_damaged_file(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text('id,"text\n' + "".join(f"{i},row\n" for i in range(5)))
    with pytest.raises(DamagedFileError, match="unreadable CSV header"):
        _read(path, CorpusSpec())


def test_stray_quote_rows_are_copied_by_the_same_numbering(tmp_path):
    """dedup --apply copies rows by the reader's numbering; both agree on a stray quote."""
    path = tmp_path / "stray.csv"
    path.write_text(_stray_quote_csv(200, stray_row=3))
    items = _read(path, CorpusSpec(id_field="id"))
    raw = list(raw_rows(io.BytesIO(path.read_bytes()), str(path), CorpusSpec(id_field="id")))
    assert raw[0] == ["id", "text"]
    assert len(raw) - 1 == len(items)
    for (number, values), item in zip(raw[1:], items, strict=True):
        assert item.source == f"{path}:{number}"
        if isinstance(item, CorpusRecord):
            assert values[0] == item.id


def test_max_record_bytes_counts_bytes_not_characters(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("é" * 600 + "\nshort\n" + "x" * 5000 + "\nlast\n", encoding="utf-8")
    items = _read(path, CorpusSpec(max_record_bytes=1000))
    assert [type(item).__name__ for item in items] == [
        "RejectedRow",
        "CorpusRecord",
        "RejectedRow",
        "CorpusRecord",
    ]
    assert items[0].reason == "record larger than the 1000-byte limit (1200 bytes)"
    assert items[2].reason == "record larger than the 1000-byte limit (5000 bytes)"
    assert items[3].text == "last"


def test_invalid_utf8_in_a_parquet_string_column_rejects_only_its_row(tmp_path):
    values = [f"text {i}".encode() for i in range(6)]
    values[2] = b"bad \xff\xfe bytes"
    binary = pa.array(values, pa.binary())
    strings = pa.Array.from_buffers(pa.string(), len(values), binary.buffers())
    path = tmp_path / "u.parquet"
    pq.write_table(pa.table({"id": [f"u{i}" for i in range(6)], "text": strings}), path)
    items = _read(path, CorpusSpec(id_field="id"))
    assert [type(item).__name__ for item in items].count("CorpusRecord") == 5
    bad = items[2]
    assert isinstance(bad, RejectedRow) and bad.source == f"{path}:3"
    assert bad.reason == "undecodable bytes (not valid UTF-8)"
    assert "\\xff" in bad.excerpt


def test_invalid_utf8_in_a_parquet_table_names_the_file(tmp_path):
    binary = pa.array([b"ok", b"bad \xff"], pa.binary())
    strings = pa.Array.from_buffers(pa.string(), 2, binary.buffers())
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"sentence1": strings}), path)
    with pytest.raises(DataFileError, match=r"t\.parquet: a string column holds text that is not"):
        read_table(path)


def test_a_huge_text_is_cut_before_tokenising(tiny_encoder, monkeypatch):
    seen: list[int] = []
    tokenizer = tiny_encoder.tokenizer

    def recording(texts, **kwargs):
        seen.extend(len(text) for text in texts)
        return tokenizer(texts, **kwargs)

    huge = " ".join(f"word{i % 97} and more" for i in range(300_000))  # ~5 MB
    spaced = " " * 300_000 + "hello world"  # too few tokens in any short prefix
    expected = tokenizer(
        [huge.lower() if tiny_encoder.do_lower_case else huge, spaced],
        truncation=True,
        max_length=tiny_encoder.max_seq_length,
    )["input_ids"]
    monkeypatch.setattr(tiny_encoder, "tokenizer", recording)
    tokens = tiny_encoder.tokenize([huge, "a short one", spaced])
    assert max(seen[:2]) <= tiny_encoder.max_seq_length * CUT_CHARS_PER_TOKEN
    assert tokens.input_ids[0] == expected[0]
    assert tokens.input_ids[2] == expected[1]
    assert tokens.truncated.tolist() == [True, False, False]


def test_an_output_folder_inside_the_input_glob_is_refused_untouched(tmp_path, tiny_st_dir, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_bytes(_jsonl(10))
    status = sbert(_embed(f"{data}/**", data / "emb", tiny_st_dir))
    assert status == 2
    assert "is inside --input" in capsys.readouterr().err
    assert not (data / "emb").exists()
    # A folder the glob already reaches (an earlier run's output) is refused the same way.
    assert sbert(_embed(f"{data}/*.jsonl", data / "emb", tiny_st_dir)) == 0
    before = sorted(p.name for p in (data / "emb").rglob("*"))
    status = sbert(_embed(f"{data}/**", data / "emb", tiny_st_dir, "--overwrite"))
    assert status == 2
    assert "is inside --input" in capsys.readouterr().err
    assert sorted(p.name for p in (data / "emb").rglob("*")) == before
