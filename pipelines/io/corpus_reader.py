"""Reading corpus files into records, with every bad row turned into a rejection (Beam-free).

A file is read from a binary stream (already decompressed) as ``.txt`` (one text per line),
``.jsonl``, ``.csv``/``.tsv`` (header row; TSV with quoting off) or ``.parquet``. Each row yields
either a :class:`CorpusRecord` or a :class:`RejectedRow` with a reason, so that for every file
rows read == records + rejections.

What a row is, so that the count is exact:

* txt, jsonl: one physical line (ending in ``\\n``, ``\\r\\n`` or a lone ``\\r``). A UTF-8 byte
  order mark at the start of the file is dropped. A line longer than ``max_record_bytes`` is one
  rejected row, skipped without being held in memory.
* csv, tsv: one record after the header. A record is one physical line, except that a quoted
  CSV field may span lines; such a record is one row, numbered like any other. A quoted field
  that is still open after ``max_record_lines`` lines or ``max_record_bytes`` bytes, or at the
  end of the file, or whose record then has the wrong number of fields, is taken for a stray
  quote: only its first line becomes a rejected row, and reading resumes at the next line. So
  every physical line belongs to exactly one row, and a stray quote costs one line.
* parquet: one table row. A string value that is not valid UTF-8 rejects its row only.

A JSON line nested deeper than ``MAX_JSON_DEPTH`` arrays and objects is a rejected row, refused
before it is parsed: Python's parser recurses once per level, so a line nested a few thousand
deep would otherwise end the job with a ``RecursionError``.

Rows are numbered from 1 (the CSV/TSV header is not a row); derived ids are ``{prefix}:{row}``.
``max_record_bytes`` counts bytes of the raw row (the line or lines, without the final line
ending; for Parquet, the UTF-8 text). A file that cannot be read to its end (truncated or
corrupt compression, a damaged Parquet file, an unreadable CSV header) raises
:class:`DamagedFileError`, which says how many rows were read before the damage.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import BinaryIO

import pyarrow as pa
from sbert_pipeline.io.record_limits import DEFAULT_MAX_RECORD_BYTES, DEFAULT_MAX_RECORD_LINES
from sbert_pipeline.io.text_rows import (
    DelimitedRecords,
    LongLine,
    Row,
    decode_line,
    ending_length,
    physical_lines,
    too_large_reason,
)

from sbert_core.errors import DataFileError
from sbert_core.tabular import detect_format

EXCERPT_CHARS = 200
ON_BAD_FILE_CHOICES = ("fail", "skip")
# Arrays and objects one JSON line may nest (orjson's limit too). Fixed rather than "whatever
# the parser survives", which depends on how deep the stack already is where the line is read;
# this one leaves room under Python's recursion limit for copying the value (--keep-fields).
MAX_JSON_DEPTH = 255
# What nests in JSON text: a string (skipped whole, brackets in it included) or a bracket. A
# string left open runs to the end of the line, so that no character is scanned twice.
_JSON_NESTING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]')
# What the standard library and pyarrow raise on a truncated or corrupt file: gzip, bz2 and
# zlib errors are OSError, EOFError or zlib.error; Parquet errors are ArrowException or OSError;
# a nested Parquet string that is not UTF-8 fails the conversion with UnicodeDecodeError.
DAMAGE_ERRORS = (OSError, EOFError, zlib.error, pa.ArrowException, UnicodeDecodeError)


@dataclass(frozen=True)
class CorpusSpec:
    """How to read a corpus: format, which fields hold the text and the id, what to keep."""

    fmt: str | None = None  # None: from each file's extension
    text_field: str = "text"
    id_field: str | None = None  # None: ids derived from file and row
    keep_fields: tuple[str, ...] = ()
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    max_record_lines: int = DEFAULT_MAX_RECORD_LINES  # lines one quoted CSV field may span
    # "fail": a damaged file fails the job; "skip": it becomes one rejected row.
    on_bad_file: str = "fail"

    def __post_init__(self) -> None:
        if self.max_record_bytes < 1:
            raise ValueError(f"--max-record-bytes must be at least 1, got {self.max_record_bytes}")
        if self.max_record_lines < 1:
            raise ValueError(f"--max-record-lines must be at least 1, got {self.max_record_lines}")
        if self.on_bad_file not in ON_BAD_FILE_CHOICES:
            raise ValueError(
                f"--on-bad-file must be one of {', '.join(ON_BAD_FILE_CHOICES)}, "
                f"got {self.on_bad_file!r}"
            )


@dataclass(frozen=True)
class CorpusRecord:
    """One good text with its id, where it came from, and pass-through fields (as strings)."""

    id: str
    text: str
    source: str  # "file:row"
    fields: tuple[tuple[str, str | None], ...] = field(default=())


@dataclass(frozen=True)
class RejectedRow:
    """A row that could not become a record, and why (the ``_errors/`` contract)."""

    id: str | None
    source: str
    reason: str
    excerpt: str

    def to_dict(self) -> dict:
        """The ``_errors/`` Parquet row (its fields, in ERRORS_SCHEMA's order)."""
        return asdict(self)


class DamagedFileError(DataFileError):
    """A corpus file could not be read to its end; ``rows`` rows were read before the damage."""

    def __init__(self, path: str, rows: int, detail: str) -> None:
        self.path = path
        self.rows = rows
        self.detail = detail
        super().__init__(f"{path}: damaged file, unreadable after {rows} rows ({detail})")


def describe_damage(err: BaseException) -> str:
    """``Type: message`` of a low-level read error, for messages and dead letters."""
    message = str(err).strip()
    return f"{type(err).__name__}: {message}" if message else type(err).__name__


def read_corpus_file(
    stream: BinaryIO, path: str, spec: CorpusSpec, id_prefix: str
) -> Iterator[CorpusRecord | RejectedRow]:
    """Yield a record or a rejection for every row of one file.

    Args:
        stream: the file's bytes, already decompressed.
        path: the file's path, used for the format and in ``source``.
        spec: fields and format.
        id_prefix: prefix of derived ids (``{id_prefix}:{row}``), stable across reruns.

    Raises:
        DamagedFileError: the file cannot be read to its end; what was yielded before stands.
        DataFileError: the format cannot be told from the extension.
    """
    fmt = detect_format(path, spec.fmt)
    rows = 0
    try:
        if fmt == "parquet":
            items = _parquet_rows(stream, path, spec, id_prefix)
        else:
            items = _text_file_items(stream, path, fmt, spec, id_prefix)
        for item in items:
            rows += 1
            yield item
    except DAMAGE_ERRORS as err:
        raise DamagedFileError(path, rows, describe_damage(err)) from err


def raw_rows(stream: BinaryIO, path: str, spec: CorpusSpec) -> Iterator:
    """A text file's rows as :func:`read_corpus_file` numbers them, for copying rows verbatim.

    Yields first the header (the CSV/TSV column names, None for txt and jsonl), then
    ``(row, raw)``: the line as read with its ending (txt, jsonl) or the field values (csv, tsv);
    ``raw`` is None for a row the reader rejected before parsing it (too large, stray quote).

    Raises:
        DamagedFileError: as :func:`read_corpus_file`.
    """
    fmt = detect_format(path, spec.fmt)
    try:
        rows = _rows_of(stream, path, fmt, spec)
        yield next(rows)
        for number, row in enumerate(rows, start=1):
            if row.problem is not None:
                yield number, None
            else:
                yield number, row.text if row.values is None else row.values
    except DAMAGE_ERRORS as err:
        raise DamagedFileError(path, 0, describe_damage(err)) from err


# ------------------------------------------------------------------- rows of a text file


def _rows_of(stream: BinaryIO, path: str, fmt: str, spec: CorpusSpec) -> Iterator:
    """The header (None for txt/jsonl) followed by every :class:`Row` of a text file."""
    limit = spec.max_record_bytes
    lines = physical_lines(stream, limit)
    if fmt in ("txt", "jsonl"):
        yield None
        for line in lines:
            if isinstance(line, LongLine):
                yield Row(decode_line(line.head), problem=too_large_reason(line.size, limit))
                continue
            size = len(line) - ending_length(line)
            problem = too_large_reason(size, limit) if size > limit else None
            yield Row(decode_line(line), problem=problem)
        return
    records = DelimitedRecords(lines, fmt, max_bytes=limit, max_lines=spec.max_record_lines)
    rows = iter(records)
    header = next(rows, None)
    if header is None:
        yield None
        return
    if header.problem is not None or header.values is None:
        raise DamagedFileError(path, 0, f"unreadable {fmt.upper()} header: {header.problem}")
    records.expected_fields = len(header.values)
    yield header.values
    yield from rows


# ---------------------------------------------------------------------------- rows to records


def _text_file_items(stream: BinaryIO, path: str, fmt: str, spec: CorpusSpec, id_prefix: str):
    rows = _rows_of(stream, path, fmt, spec)
    header = next(rows)
    for number, row in enumerate(rows, start=1):
        source = f"{path}:{number}"
        line = row.text.rstrip("\r\n")
        if row.problem is not None:
            derived = f"{id_prefix}:{number}" if spec.id_field is None else None
            yield RejectedRow(derived, source, row.problem, excerpt(line))
        elif fmt == "txt":
            yield _make_record({spec.text_field: line}, line, path, number, spec, id_prefix)
        elif fmt == "jsonl":
            yield _json_row(line, path, number, spec, id_prefix)
        elif len(row.values) != len(header):
            reason = (
                f"malformed {fmt.upper()} row: {len(row.values)} fields, header has {len(header)}"
            )
            yield RejectedRow(None, source, reason, excerpt(line))
        else:
            values = dict(zip(header, row.values, strict=True))
            yield _make_record(values, line, path, number, spec, id_prefix)


def _json_row(line: str, path: str, row: int, spec: CorpusSpec, id_prefix: str):
    source = f"{path}:{row}"
    if _has_undecodable(line):
        return RejectedRow(None, source, "undecodable bytes (not valid UTF-8)", excerpt(line))
    if _nested_too_deep(line):
        reason = f"JSON nested too deep (more than {MAX_JSON_DEPTH} levels of arrays and objects)"
        return RejectedRow(None, source, reason, excerpt(line))
    try:
        value = json.loads(line)
    except json.JSONDecodeError as err:
        return RejectedRow(None, source, f"malformed JSON: {err.msg}", excerpt(line))
    if not isinstance(value, dict):
        return RejectedRow(None, source, "JSON line is not an object", excerpt(line))
    return _make_record(value, line, path, row, spec, id_prefix)


def _nested_too_deep(line: str) -> bool:
    """Whether the arrays and objects of a JSON line nest deeper than ``MAX_JSON_DEPTH``."""
    # Fewer opening brackets than the limit cannot nest past it: the common case, in C.
    if line.count("[") + line.count("{") <= MAX_JSON_DEPTH:
        return False
    depth = 0
    for match in _JSON_NESTING.finditer(line):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False


def _parquet_rows(stream: BinaryIO, path: str, spec: CorpusSpec, id_prefix: str):
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(stream)
    names = set(parquet.schema_arrow.names)
    wanted = [spec.text_field, spec.id_field, *spec.keep_fields]
    columns = [name for name in dict.fromkeys(wanted) if name is not None and name in names]
    row = 0
    for batch in parquet.iter_batches(columns=columns or None, batch_size=8192):
        for values in _batch_rows(batch):
            row += 1
            yield _make_record(values, None, path, row, spec, id_prefix)


def _batch_rows(batch: pa.RecordBatch) -> list[dict]:
    """A Parquet batch as dicts; a string that is not UTF-8 is kept with its bytes escaped (as
    in text files), so that only its row is rejected."""
    try:
        return batch.to_pylist()
    except UnicodeDecodeError:
        # Parquet requires UTF-8 in string columns but not every writer checks; decode the
        # string columns ourselves. A bad string in a nested column still fails the file.
        columns = []
        for column in batch.columns:
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                binary = pa.large_binary() if pa.types.is_large_string(column.type) else pa.binary()
                values = column.cast(binary).to_pylist()
                columns.append([None if v is None else decode_line(v) for v in values])
            else:
                columns.append(column.to_pylist())
        names = batch.schema.names
        return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


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
    size = _utf8_size(text)
    if size > spec.max_record_bytes:
        return RejectedRow(
            record_id, source, too_large_reason(size, spec.max_record_bytes), excerpt(text)
        )
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


def _utf8_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (``--max-record-bytes`` counts bytes, not characters)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


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
        # ensure_ascii=False keeps undecodable bytes as surrogates, shown as \xNN below.
        value = (
            json.dumps(value, default=repr, ensure_ascii=False)
            if isinstance(value, dict)
            else repr(value)
        )
    return _printable(value[:EXCERPT_CHARS])
