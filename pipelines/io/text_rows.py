"""A text corpus file's rows, from its bytes: physical lines and CSV/TSV records (Beam-free).

:func:`physical_lines` splits a byte stream at ``\\n``, ``\\r\\n`` and lone ``\\r``, drops a
UTF-8 byte order mark, and hands a line over the byte limit back as a :class:`LongLine` (its
first bytes and its size) without holding it whole. :class:`DelimitedRecords` turns those lines
into CSV/TSV records, a quoted field spanning lines included, and contains a stray quote to the
one line it starts on. What a row is, and why, is in :mod:`sbert_pipeline.io.corpus_reader`, which
turns these rows into records and rejections.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

UTF8_BOM = b"\xef\xbb\xbf"
# Bytes kept of an over-long line: enough for the 200-character excerpt of its rejection even
# when every character takes four bytes.
LONG_LINE_HEAD = 800
# csv refuses fields over 128 KiB by default; we apply our own, larger record limit instead.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
# Reading the rest of an over-long line in pieces of this size keeps memory bounded.
_DRAIN_CHUNK = 1 << 20
# A lone \r ends a line too (universal newlines), but not the \r of \r\n.
_LONE_CR = re.compile(rb"(?<=\r)(?!\n)")


@dataclass(frozen=True)
class LongLine:
    """A physical line over the record limit: its first bytes and its size (the rest skipped)."""

    head: bytes
    size: int


def physical_lines(stream: BinaryIO, limit: int) -> Iterator[bytes | LongLine]:
    """Lines with their endings, the byte order mark dropped; a line over ``limit`` bytes (not
    counting its ending) comes as a :class:`LongLine` and is never held whole."""
    readline = stream.readline
    line = readline(limit + 2)  # room for the line and a \r\n
    read = len(line)
    if line.startswith(UTF8_BOM):
        line = line[len(UTF8_BOM) :]
    while line:
        if read >= limit + 2 and not line.endswith(b"\n"):
            head, size = line[:LONG_LINE_HEAD], len(line)
            while not line.endswith(b"\n"):
                line = readline(_DRAIN_CHUNK)
                if not line:
                    break
                size += len(line)
            yield LongLine(head, size - ending_length(line))
        elif b"\r" in line and not (line.endswith(b"\r\n") and line.count(b"\r") == 1):
            yield from (part for part in _LONE_CR.split(line) if part)
        else:
            yield line
        line = readline(limit + 2)
        read = len(line)


def ending_length(line: bytes) -> int:
    if line.endswith(b"\r\n"):
        return 2
    return 1 if line.endswith((b"\n", b"\r")) else 0


def decode_line(line: bytes) -> str:
    # errors="surrogateescape" maps each byte that is not UTF-8 to U+DC80..U+DCFF, so that a bad
    # row is rejected by name and can still be shown and copied byte for byte.
    return line.decode("utf-8", "surrogateescape")


def too_large_reason(size: int, limit: int) -> str:
    """Why a row over the byte limit is rejected."""
    return f"record larger than the {limit}-byte limit ({size} bytes)"


@dataclass(frozen=True)
class Row:
    """One row of a text file before it becomes a record."""

    text: str  # the row as read, with its line ending(s); an over-long line's start only
    values: list[str] | None = None  # CSV/TSV fields
    problem: str | None = None  # why it cannot become a record


class _StrayQuote(Exception):
    """A quoted CSV field ran past the limits; raised through the csv reader."""


class _LongFirstLine(Exception):
    """A record starts with a line over the size limit."""

    def __init__(self, line: LongLine) -> None:
        super().__init__()
        self.line = line


class DelimitedRecords:
    """CSV/TSV records over physical lines, with stray quotes contained (see the module doc)."""

    def __init__(
        self, lines: Iterator[bytes | LongLine], fmt: str, *, max_bytes: int, max_lines: int
    ) -> None:
        self._lines = lines
        self._fmt = fmt
        self._max_bytes = max_bytes
        self._max_lines = max_lines
        self._back: list[bytes | LongLine] = []  # lines to read again, the next one last
        self._pending: list[tuple[bytes, str]] = []  # the current record's lines, raw and decoded
        self._size = 0
        self.expected_fields: int | None = None  # set once the header is read

    def _reader(self):
        if self._fmt == "tsv":
            return csv.reader(self._feed(), delimiter="\t", quoting=csv.QUOTE_NONE)
        return csv.reader(self._feed())

    def _next_line(self) -> bytes | LongLine | None:
        return self._back.pop() if self._back else next(self._lines, None)

    def _feed(self) -> Iterator[str]:
        """Lines for the csv reader; it asks for a second line of a record only inside quotes."""
        while True:
            line = self._next_line()
            if line is None:
                if self._pending:
                    raise _StrayQuote("still open at the end of the file")
                return
            if self._pending:
                if isinstance(line, LongLine) or self._size + len(line) > self._max_bytes:
                    self._back.append(line)
                    raise _StrayQuote(f"still open after {self._max_bytes} bytes")
                if len(self._pending) >= self._max_lines:
                    self._back.append(line)
                    raise _StrayQuote(f"still open after {self._max_lines} lines")
            elif isinstance(line, LongLine):
                raise _LongFirstLine(line)
            text = decode_line(line)
            self._pending.append((line, text))
            self._size += len(line)
            yield text

    def _rewind(self, why: str) -> Row:
        """Reject the current record's first line and read its other lines again."""
        (_, first), *rest = self._pending
        self._back.extend(line for line, _ in reversed(rest))
        reason = (
            f"unterminated quoted field ({why}); this line is rejected and reading resumed at "
            "the next line"
        )
        return Row(first, problem=reason)

    def __iter__(self) -> Iterator[Row]:
        reader = self._reader()
        name = self._fmt.upper()
        while True:
            self._pending, self._size = [], 0
            try:
                values = next(reader)
            except StopIteration:
                return
            except _LongFirstLine as long:
                problem = too_large_reason(long.line.size, self._max_bytes)
                yield Row(decode_line(long.line.head), problem=problem)
                reader = self._reader()
                continue
            except _StrayQuote as err:
                yield self._rewind(str(err))
                reader = self._reader()
                continue
            except csv.Error as err:
                if len(self._pending) > 1:
                    yield self._rewind(f"{err}")
                else:
                    yield Row(self._text(), problem=f"malformed {name} row: {err}")
                continue
            expected = self.expected_fields
            if expected is not None and len(values) != expected and len(self._pending) > 1:
                why = f"its record spans {len(self._pending)} lines and has {len(values)} fields"
                yield self._rewind(why + f", the header has {expected}")
                continue
            size = self._size - ending_length(self._pending[-1][0])
            if size > self._max_bytes:
                yield Row(self._text(), problem=too_large_reason(size, self._max_bytes))
                continue
            yield Row(self._text(), values=values)

    def _text(self) -> str:
        return "".join(text for _, text in self._pending)
