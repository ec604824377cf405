"""Reading small labelled tables (STS pairs, NLI pairs, text lists) from TSV/CSV/JSONL/Parquet.

Files may be compressed (``.gz``, ``.bz2``). TSV is read with quoting off, as in this project's
data files where sentences may start with a double quote; CSV uses standard quoting. A UTF-8 byte
order mark at the start of a text file is dropped. Every problem is reported with the file, the
row (1-based, header excluded) and the column; a truncated or corrupt file with the file.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sbert_core.errors import DataFileError

FORMATS = ("tsv", "csv", "jsonl", "parquet", "txt")
COMPRESSED_SUFFIXES = (".gz", ".bz2")
# Compressed input is read in pieces of this size.
_COMPRESSED_CHUNK = 1 << 16


def detect_format(path: str | Path, fmt: str | None = None) -> str:
    """The table format from ``fmt`` or the file extension (``.gz``/``.bz2`` ignored)."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise DataFileError(
                f"{path}: unknown format {fmt!r}; valid formats: {', '.join(FORMATS)}"
            )
        return fmt
    name = str(path).lower()
    for suffix in COMPRESSED_SUFFIXES:
        name = name.removesuffix(suffix)
    suffix = name.rsplit(".", 1)[-1] if "." in name else ""
    aliases = {"json": "jsonl", "ndjson": "jsonl", "pq": "parquet", "text": "txt"}
    suffix = aliases.get(suffix, suffix)
    if suffix not in FORMATS:
        raise DataFileError(
            f"{path}: cannot tell the format from the extension; use one of "
            f"{', '.join('.' + f for f in FORMATS)} (optionally .gz or .bz2) or pass the format"
        )
    return suffix


@dataclass(frozen=True)
class Table:
    """Rows of a file as dicts, with the file's column names."""

    path: str
    columns: list[str]
    rows: list[dict]

    def column(self, name: str) -> list:
        """Values of one column; raises ``DataFileError`` listing the columns if it is missing."""
        self.require([name])
        return [row.get(name) for row in self.rows]

    def require(self, names: Sequence[str]) -> None:
        """Raise ``DataFileError`` naming the file and every missing column."""
        missing = [name for name in names if name not in self.columns]
        if missing:
            raise DataFileError(
                f"{self.path}: missing column(s) {', '.join(repr(m) for m in missing)} "
                f"(the file has: {', '.join(self.columns) or 'no columns'})"
            )


def read_table(path: str | Path, fmt: str | None = None) -> Table:
    """Read a whole table into memory. ``txt`` files become one column named ``text``.

    Raises:
        DataFileError: missing file, undecodable bytes, malformed JSON line or ragged row.
    """
    fmt = detect_format(path, fmt)
    path = Path(path)
    if not path.is_file():
        raise DataFileError(f"{path}: no such file")
    if fmt == "parquet":
        return _read_parquet(path)
    try:
        with _open_text(path) as handle:
            if fmt == "jsonl":
                rows = list(_jsonl_rows(handle, path))
                columns = list(dict.fromkeys(key for row in rows for key in row))
                return Table(str(path), columns, rows)
            if fmt == "txt":
                rows = [{"text": line.rstrip("\n")} for line in handle]
                return Table(str(path), ["text"], rows)
            return _read_delimited(handle, path, fmt)
    except UnicodeDecodeError as err:
        raise DataFileError(f"{path}: not valid UTF-8 ({err})") from err
    except (OSError, EOFError, zlib.error) as err:  # gzip.BadGzipFile is an OSError
        raise DataFileError(f"{path}: unreadable, truncated or corrupt ({err})") from err


def _open_text(path: Path) -> io.TextIOBase:
    # utf-8-sig drops a byte order mark (else it sticks to the first column's name).
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline="")
    if suffix == ".bz2":
        return io.TextIOWrapper(open_bz2(path.open("rb")), encoding="utf-8-sig", newline="")
    return path.open("r", encoding="utf-8-sig", newline="")


def open_bz2(raw: BinaryIO) -> BinaryIO:
    """Decompress concatenated bz2 streams from ``raw``, strictly.

    Unlike ``bz2.BZ2File``, which silently stops at bytes after the last stream that are not
    bz2, this raises ``OSError`` for them (they may be the damaged rest of the data); a truncated
    stream raises ``EOFError``.
    """
    return io.BufferedReader(_StrictBz2Reader(raw), buffer_size=_COMPRESSED_CHUNK)


class _StrictBz2Reader(io.RawIOBase):
    """Decompresses concatenated bz2 streams; trailing bytes that are not bz2 are an error."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw
        self._decompressor = bz2.BZ2Decompressor()
        self._started = False  # the current stream has had input

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while True:
            if self._decompressor.eof:
                data = self._decompressor.unused_data or self._raw.read(_COMPRESSED_CHUNK)
                if not data:
                    return 0
                self._decompressor, self._started = bz2.BZ2Decompressor(), False
            elif self._decompressor.needs_input:
                data = self._raw.read(_COMPRESSED_CHUNK)
                if not data:
                    raise EOFError("bz2 data ended before the end-of-stream marker (truncated)")
            else:
                data = b""
            try:
                out = self._decompressor.decompress(data, len(buffer))
            except OSError as err:
                where = "after the last bz2 stream" if not self._started else "in a bz2 stream"
                raise OSError(f"invalid data {where} ({err})") from err
            self._started = self._started or bool(data)
            if out:
                buffer[: len(out)] = out
                return len(out)

    def close(self) -> None:
        self._raw.close()
        super().close()


def _read_delimited(handle, path: Path, fmt: str) -> Table:
    if fmt == "tsv":
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
    else:
        reader = csv.reader(handle)
    header = next(reader, None)
    if header is None:
        return Table(str(path), [], [])
    rows = []
    for number, values in enumerate(reader, start=1):
        if not values:
            continue
        # Trailing extra fields are tolerated (STSb rows carry optional licence columns);
        # a row shorter than the header is not.
        if len(values) < len(header):
            raise DataFileError(
                f"{path}: row {number} has {len(values)} fields, the header has {len(header)}"
            )
        rows.append(dict(zip(header, values, strict=False)))
    return Table(str(path), header, rows)


def _jsonl_rows(handle, path: Path) -> Iterator[dict]:
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFileError(f"{path}: row {number} is not valid JSON ({err.msg})") from err
        except RecursionError:  # arrays or objects nested thousands deep
            raise DataFileError(f"{path}: row {number} is JSON nested too deep") from None
        if not isinstance(value, dict):
            raise DataFileError(f"{path}: row {number} is not a JSON object")
        yield value


def _read_parquet(path: Path) -> Table:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as err:  # pyarrow raises several unrelated types for bad files
        raise DataFileError(f"{path}: unreadable Parquet ({err})") from err
    try:
        rows = table.to_pylist()
    except UnicodeDecodeError as err:
        reason = f"a string column holds text that is not UTF-8 ({err})"
        raise DataFileError(f"{path}: {reason}") from err
    return Table(str(path), table.column_names, rows)


def float_column(table: Table, name: str) -> list[float]:
    """A numeric column; raises ``DataFileError`` naming file, row and column of a bad value."""
    values = []
    for number, value in enumerate(table.column(name), start=1):
        try:
            number_value = float(value)
        except (TypeError, ValueError):
            number_value = float("nan")
        if number_value != number_value or isinstance(value, bool):
            raise DataFileError(
                f"{table.path}: row {number}, column {name!r}: {value!r} is not a number"
            )
        values.append(number_value)
    return values


def text_column(table: Table, name: str) -> list[str]:
    """A text column; an empty or non-text value raises ``DataFileError`` naming where."""
    values = []
    for number, value in enumerate(table.column(name), start=1):
        if not isinstance(value, str) or not value.strip():
            raise DataFileError(
                f"{table.path}: row {number}, column {name!r}: "
                f"expected non-empty text, got {value!r}"
            )
        values.append(value)
    return values
