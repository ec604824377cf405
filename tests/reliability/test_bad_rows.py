"""Item 7 of issue 25: bad rows stay rows.

A JSONL line nested thousands of levels deep once ended the embed job with a ``RecursionError``.
It is now a dead letter with a reason, like any malformed line, and the ledger still reconciles:
rows read == rows embedded + rows rejected. Parquet, the other format with nesting, cannot hold a
value deeper than Arrow reads (a deeper file is a damaged file, item 7 of issue 13).
"""

from __future__ import annotations

import io
import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
from output_folders_helpers import embed_argv, texts
from sbert_pipeline.io.corpus_reader import (
    EXCERPT_CHARS,
    MAX_JSON_DEPTH,
    CorpusRecord,
    CorpusSpec,
    RejectedRow,
    read_corpus_file,
)
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.output_dir import read_manifest
from sbert_pipeline.io.schemas import ERRORS_DIR

from tests.stage_commands import embed

DEEP = 2000


def _nested(depth: int, inner: str = "1") -> str:
    """A JSON array ``depth`` levels deep."""
    return "[" * depth + inner + "]" * depth


def _read(lines: list[str], spec: CorpusSpec | None = None) -> list[CorpusRecord | RejectedRow]:
    stream = io.BytesIO("".join(line + "\n" for line in lines).encode())
    return list(read_corpus_file(stream, "c.jsonl", spec or CorpusSpec(), "c"))


def test_a_line_nested_2000_deep_is_a_dead_letter_and_the_job_succeeds(tmp_path, tiny_st_dir):
    good = [json.dumps({"text": text}) for text in texts(6)]
    deep = [
        '{"text": ' + _nested(DEEP) + "}",  # the text itself
        _nested(DEEP),  # not even an object
        '{"text": "fine text", "meta": ' + _nested(DEEP) + "}",  # another field
    ]
    lines = good[:2] + deep[:1] + good[2:4] + deep[1:] + good[4:]
    corpus = tmp_path / "in" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "out"

    summary = embed(embed_argv(corpus, out, tiny_st_dir))

    assert (summary.read, summary.embedded, summary.rejected) == (9, 6, 3)
    counts = read_manifest(str(out))["counts"]
    assert counts["read"] == counts["embedded"] + counts["rejected"] == len(lines)
    ids, _ = EmbeddingsDataset.open(str(out)).load()
    deep_rows = {lines.index(line) + 1 for line in deep}
    assert sorted(ids) == sorted(f"corpus.jsonl:{n}" for n in range(1, 10) if n not in deep_rows)
    errors = pq.read_table(out / ERRORS_DIR).to_pylist()
    assert sorted(int(row["source"].rsplit(":", 1)[1]) for row in errors) == sorted(deep_rows)
    for row in errors:
        assert "nested too deep" in row["reason"], row["reason"]
        line = lines[int(row["source"].rsplit(":", 1)[1]) - 1]
        assert row["excerpt"] == line[:EXCERPT_CHARS]  # the raw line's start


def test_the_depth_limit_is_exact_and_brackets_in_strings_do_not_count():
    at_limit = '{"text": "kept", "meta": ' + _nested(MAX_JSON_DEPTH - 1) + "}"
    over = '{"text": "refused", "meta": ' + _nested(MAX_JSON_DEPTH) + "}"
    in_string = json.dumps({"text": "[" * DEEP + '\\"{' * DEEP})
    rows = _read([at_limit, over, in_string], CorpusSpec(keep_fields=("meta",)))
    assert isinstance(rows[0], CorpusRecord)
    assert rows[0].fields == (("meta", json.dumps(json.loads(at_limit)["meta"])),)
    assert isinstance(rows[1], RejectedRow)
    assert rows[1].reason == (
        f"JSON nested too deep (more than {MAX_JSON_DEPTH} levels of arrays and objects)"
    )
    assert isinstance(rows[2], CorpusRecord) and rows[2].text == json.loads(in_string)["text"]


def test_a_deep_line_that_is_also_malformed_is_one_dead_letter():
    rows = _read(["[" * DEEP, '{"text": "after"}'])
    assert [type(row) for row in rows] == [RejectedRow, CorpusRecord]
    assert "nested too deep" in rows[0].reason


def test_an_unclosed_string_is_scanned_once():
    """A string left open (escaped quotes all along) must not make the depth scan quadratic."""
    line = '"' + '\\"' * 200_000 + "[" * (MAX_JSON_DEPTH + 1)
    started = time.perf_counter()
    (row,) = _read([line])
    assert time.perf_counter() - started < 5  # quadratic: about 10^10 steps
    assert isinstance(row, RejectedRow) and row.reason.startswith("malformed JSON")


def test_a_nested_parquet_value_is_kept_as_json_text():
    """Parquet nests no deeper than Arrow reads; a kept nested value becomes its JSON text."""
    value: object = 1
    for _ in range(100):
        value = [value]
    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": ["a text"], "meta": [value]}), buffer)
    buffer.seek(0)
    spec = CorpusSpec(keep_fields=("meta",))
    (row,) = read_corpus_file(buffer, "c.parquet", spec, "c")
    assert isinstance(row, CorpusRecord)
    assert row.fields == (("meta", json.dumps(value)),)
