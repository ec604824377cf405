"""Reading corpus files into records, with every bad row turned into a rejection (Beam-free).

A file is read from a binary stream (already decompressed) as ``.txt`` (one text per line),
``.jsonl``, ``.csv``/``.tsv`` (header row; TSV with quoting off) or ``.parquet``. Each row yields
either a :class:`CorpusRecord` or a :class:`RejectedRow` with a reason, so that for every file
rows read == records + rejections.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from sbert_core.tabular import detect_format

EXCERPT_CHARS = 200
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
# csv refuses fields over 128 KiB by default; we apply our own, larger record limit instead.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@dataclass(frozen=True)
class CorpusSpec:
    """How to read a corpus: format, which fields hold the text and the id, what to keep."""

    fmt: str | None = None  # None: from each file's extension
    text_field: str = "text"
    id_field: str | None = None  # None: ids derived from file and row
    keep_fields: tuple[str, ...] = ()
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES


@dataclass(frozen=True)
class CorpusRecord:
    """One good text with its id, where it came from, and pass-through fields (as strings)."""

    id: str
    text: str
    source: str  # "file:row"
    fields: tuple[tuple[str, str | None], ...] = field(default=())


@dataclass(frozen=True)
class RejectedRow:
    """A row that could not become a record, and why (the ``errors/`` contract)."""

    id: str | None
    source: str
    reason: str
    excerpt: str

    def to_dict(self) -> dict:
        """The ``errors/`` Parquet row."""
        return {
            "id": self.id,
            "source": self.source,
            "reason": self.reason,
            "excerpt": self.excerpt,
        }


def read_corpus_file(
    stream: BinaryIO, path: str, spec: CorpusSpec, id_prefix: str
) -> Iterator[CorpusRecord | RejectedRow]:
    """Yield a record or a rejection for every row of one file.

    Args:
        stream: the file's bytes, already decompressed.
        path: the file's path, used for the format and in ``source``.
        spec: fields and format.
        id_prefix: prefix of derived ids (``{id_prefix}:{row}``), stable across reruns.
    """
    fmt = detect_format(path, spec.fmt)
    if fmt == "parquet":
        yield from _parquet_rows(stream, path, spec, id_prefix)
        return
    text = io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape", newline="")
    if fmt == "txt":
        for row, line in enumerate(text, start=1):
            line = line.rstrip("\r\n")
            yield _make_record({spec.text_field: line}, line, path, row, spec, id_prefix)
    elif fmt == "jsonl":
        for row, line in enumerate(text, start=1):
            yield _json_row(line.rstrip("\r\n"), path, row, spec, id_prefix)
    else:
        yield from _delimited_rows(text, path, fmt, spec, id_prefix)


def _json_row(line: str, path: str, row: int, spec: CorpusSpec, id_prefix: str):
    source = f"{path}:{row}"
    if _has_undecodable(line):
        return RejectedRow(None, source, "undecodable bytes (not valid UTF-8)", excerpt(line))
    if len(line) > spec.max_record_bytes:
        return _too_large(source, line, spec)
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        return RejectedRow(None, source, f"malformed JSON: {err.msg}", excerpt(line))
    if not isinstance(value, dict):
        return RejectedRow(None, source, "JSON line is not an object", excerpt(line))
    return _make_record(value, line, path, row, spec, id_prefix)


def _delimited_rows(text, path: str, fmt: str, spec: CorpusSpec, id_prefix: str):
    if fmt == "tsv":
        reader = csv.reader(text, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(text)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as err:
        yield RejectedRow(None, f"{path}:header", f"malformed header: {err}", "")
        return
    row = 0
    while True:
        row += 1
        source = f"{path}:{row}"
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            yield RejectedRow(None, source, f"malformed {fmt.upper()} row: {err}", "")
            continue
        raw = "\t".join(values) if fmt == "tsv" else ",".join(values)
        if len(values) != len(header):
            reason = f"malformed {fmt.upper()} row: {len(values)} fields, header has {len(header)}"
            yield RejectedRow(None, source, reason, excerpt(raw))
            continue
        yield _make_record(dict(zip(header, values, strict=True)), raw, path, row, spec, id_prefix)


def _parquet_rows(stream: BinaryIO, path: str, spec: CorpusSpec, id_prefix: str):
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(stream)
    names = set(parquet.schema_arrow.names)
    wanted = [spec.text_field, spec.id_field, *spec.keep_fields]
    columns = [name for name in dict.fromkeys(wanted) if name is not None and name in names]
    row = 0
    for batch in parquet.iter_batches(columns=columns or None, batch_size=8192):
        for values in batch.to_pylist():
            row += 1
            yield _make_record(values, None, path, row, spec, id_prefix)


def _make_record(
    values: dict, raw: str | None, path: str, row: int, spec: CorpusSpec, id_prefix: str
) -> CorpusRecord | RejectedRow:
    source = f"{path}:{row}"
    record_id: str | None = f"{id_prefix}:{row}"
    if spec.id_field is not None:
        raw_id = values.get(spec.id_field)
        if raw_id is None or isinstance(raw_id, (dict, list)) or str(raw_id).strip() == "":
            reason = "missing id field" if spec.id_field not in values else "null or empty id"
            return RejectedRow(None, source, f"{reason} {spec.id_field!r}", excerpt(raw or values))
        record_id = str(raw_id)
        if _has_undecodable(record_id):
            reason = f"undecodable bytes in id field {spec.id_field!r}"
            return RejectedRow(None, source, reason, excerpt(raw or values))
    reason = _text_problem(values, spec)
    if reason is not None:
        return RejectedRow(record_id, source, reason, excerpt(raw if raw is not None else values))
    text = values[spec.text_field]
    if len(text) > spec.max_record_bytes:
        return _too_large(source, text, spec, record_id)
    kept = tuple((name, _as_string(values.get(name))) for name in spec.keep_fields)
    return CorpusRecord(record_id, text, source, kept)


def _text_problem(values: dict, spec: CorpusSpec) -> str | None:
    if spec.text_field not in values:
        return f"missing field {spec.text_field!r}"
    text = values[spec.text_field]
    if text is None:
        return f"null text in {spec.text_field!r}"
    if not isinstance(text, str):
        return f"non-string text in {spec.text_field!r} ({type(text).__name__})"
    if _has_undecodable(text):
        return "undecodable bytes (not valid UTF-8)"
    if not text.strip():
        return "empty text" if not text else "whitespace-only text"
    return None


def _too_large(source: str, text: str, spec: CorpusSpec, record_id: str | None = None):
    reason = f"record larger than the {spec.max_record_bytes}-byte limit ({len(text)} characters)"
    return RejectedRow(record_id, source, reason, excerpt(text))


def _has_undecodable(text: str) -> bool:
    # errors="surrogateescape" maps each byte that is not valid UTF-8 to U+DC80..U+DCFF; any
    # other lone surrogate (from a JSON escape) cannot be written as UTF-8 either.
    return not text.isascii() and any("\ud800" <= ch <= "\udfff" for ch in text)


def _as_string(value) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return _printable(text) if _has_undecodable(text) else text


def _printable(text: str) -> str:
    """Show undecodable bytes as ``\\xNN`` escapes so the text can be written as UTF-8."""
    try:
        raw = text.encode("utf-8", "surrogateescape")  # back to the original bytes
    except UnicodeEncodeError:  # a surrogate that did not come from a byte
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "backslashreplace")


def excerpt(value) -> str:
    """The first ``EXCERPT_CHARS`` characters of a raw row, printable, for the errors file."""
    if not isinstance(value, str):
        value = json.dumps(value, default=repr) if isinstance(value, dict) else repr(value)
    return _printable(value[:EXCERPT_CHARS])
