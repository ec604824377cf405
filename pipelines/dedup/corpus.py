"""The corpus side of dedup: where each embedded id sits in the corpus, and the corpus without
its removed rows. It runs no Beam pipeline; files are read and written through
:mod:`sbert_pipeline.io.filesystems` (Beam's ``FileSystems`` for a remote path, so any Beam
filesystem).

The corpus is read with :func:`~sbert_pipeline.io.corpus_reader.read_corpus_file` and the spec the
embed job used, so that ids (also the derived ``file:row`` ids) come out the same. Every row read is
one of:

* a row the embed job did not embed: rejected when read (bad JSON, empty text, ...), a later
  row with an id seen before (the embed job keeps the first in file, row order), or a row the
  embed stage rejected (listed in its ``_errors/``). These are not written to the deduplicated
  corpus (nothing is known about their duplicates) and are listed in ``corpus_rejected.parquet``;
* an embedded row that is kept (a singleton or a group's representative): written;
* an embedded row that is removed (a duplicate of its group's representative): not written.

so ``rows read == written + removed + not embedded``. Kept rows are written in their file's
format to the same relative path under the output folder: JSONL and text lines byte for byte,
CSV and TSV as the header plus the kept rows' fields (CSV re-quoted as needed), Parquet as the
kept rows with the file's schema; ``.gz`` and ``.bz2`` files are written compressed the same way.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import posixpath
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sbert_pipeline.dedup.versions import FileKey, FileRows
from sbert_pipeline.io.corpus_files import files_sha256, match_corpus, open_decompressed
from sbert_pipeline.io.corpus_reader import (
    CorpusRecord,
    CorpusSpec,
    RejectedRow,
    excerpt,
    raw_rows,
    read_corpus_file,
)
from sbert_pipeline.io.filesystems import CompressionTypes, FileSystems
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.io.schemas import ERRORS_DIR, ERRORS_SCHEMA
from sbert_pipeline.stage_api.stops import JobFailedError
from sbert_pipeline.vectors.records import field_record

from sbert_core.tabular import detect_format

CORPUS_DIR, REJECTED_FILE = "corpus", "corpus_rejected.parquet"
NOT_EMBEDDED_REASON = (
    f"not embedded: rejected by the embed stage (see the embeddings' {ERRORS_DIR}/)"
)


@dataclass
class CorpusScan:
    """Where every embedded id was found in the corpus, and the texts that were asked for."""

    pattern: str
    spec: CorpusSpec
    files: list[tuple[str, str, int]]  # (path, id prefix, size), as match_corpus gives them
    positions: np.ndarray  # (n, 2) int64: (file number, row) of each embedded id's row
    texts: dict[str, str]
    rows: int  # rows read: records + rejections
    not_embedded: int  # rows that are not among the embeddings
    # (n,) float64 the numeric value of ``value_field`` per item, NaN where missing; None when
    # no field was asked for.
    values: np.ndarray | None = None
    digests: list[str] = field(default_factory=list)  # each file's sha256
    file_rows: list[FileRows] = field(default_factory=list)  # the records of each file
    # How the files were taken: from the previous corpus index or parsed (corpus_index.py).
    counts: dict[str, int] = field(default_factory=dict)


def scan_corpus(
    pattern: str,
    spec: CorpusSpec,
    index: dict[str, int],
    want_text: np.ndarray,
    rejected_ids: Callable[[], set[str]],
    value_field: str | None = None,
    *,
    previous: Mapping[FileKey, FileRows] | None = None,
    fetch_texts: Callable[[set[str]], dict[str, str]] | None = None,
) -> CorpusScan:
    """Read the corpus once: each embedded id's row, and the texts of the wanted items.

    Args:
        pattern: the corpus glob.
        spec: how the embed job read it (format, text and id fields).
        index: ``{id: item row}`` of every embedded id.
        want_text: ``(n,)`` bool, items whose text to keep.
        rejected_ids: gives the ids the embed jobs rejected (read only if needed).
        value_field: a numeric metadata field to read for every item (``--rank column:NAME``).
        previous: the previous run's corpus index (:func:`corpus_index.previous_index`): a
            file it holds unchanged (path, id prefix, bytes, sha256) is not parsed again, unless
            ``value_field`` is asked for (the index holds no field values).
        fetch_texts: gives the texts of ids from elsewhere (the embeddings) for the files taken
            from ``previous``; without it such a file holding a wanted text is parsed again.

    Raises:
        FileNotFoundError: nothing matches ``pattern``.
        ValueError: the corpus does not match the embeddings: an embedded id is not in it, or
            it has rows the embed job neither embedded nor rejected; or a ``value_field``
            value is not a number.
    """
    files = match_corpus(pattern)
    if value_field is not None:
        spec = replace(spec, keep_fields=(*spec.keep_fields, value_field))
        previous = None
    digests = files_sha256([path for path, _, _ in files])
    place = _Placement(index, want_text, len(index), rejected_ids, value_field)
    file_rows: list[FileRows] = []
    counts = {"reused": 0, "parsed": 0, "texts_from_embeddings": 0}
    fetch: set[str] = set()
    for number, ((path, prefix, size), digest) in enumerate(zip(files, digests, strict=True)):
        known = (previous or {}).get((path, prefix, size, digest))
        if known is not None and (fetch_texts is not None or not place.wants_any(known.ids)):
            counts["reused"] += 1
            place.rows += known.rows
            place.not_embedded += known.rows - len(known.ids)
            for item_id, line in zip(known.ids, known.numbers.tolist(), strict=True):
                if place.record(item_id, number, path, line):
                    fetch.add(item_id)
            file_rows.append(known)
            continue
        counts["parsed"] += 1
        file_rows.append(_parse_file(place, number, path, prefix, spec))
    if fetch and fetch_texts is not None:
        found = fetch_texts(fetch)
        place.texts.update(found)
        counts["texts_from_embeddings"] = len(found)
    _check_placed(place, index, f"{pattern} read with {_describe(spec)}")
    return CorpusScan(
        pattern,
        spec,
        files,
        place.positions,
        place.texts,
        place.rows,
        place.not_embedded,
        place.values,
        digests,
        file_rows,
        counts,
    )


def _parse_file(place: _Placement, number: int, path: str, prefix: str, spec) -> FileRows:
    """Parse one corpus file: place its records, keep the wanted texts; its index rows."""
    before, ids, numbers = place.rows, [], []
    with open_decompressed(path) as stream:
        for item in read_corpus_file(stream, path, spec, prefix):
            place.rows += 1
            if isinstance(item, RejectedRow):
                place.not_embedded += 1
                continue
            line = _row_number(item.source)
            ids.append(item.id)
            numbers.append(line)
            if place.record(item.id, number, path, line, item):
                place.texts[item.id] = item.text
    return FileRows(place.rows - before, np.asarray(numbers, np.int64), ids)


def _check_placed(place: _Placement, index: dict[str, int], described: str) -> None:
    """Refuse a corpus that lacks an embedded id or has rows the embed job never saw."""
    missing = np.flatnonzero(place.positions[:, 0] < 0)
    if len(missing):
        ids = list(index)
        first = ", ".join(repr(ids[row]) for row in missing[:3])
        raise ValueError(
            f"{len(missing)} of the {len(index)} embedded ids are not in the corpus {described} "
            f"(first: {first}); pass the corpus the embeddings were made from, with the same "
            "--id-field (or, for derived file:row ids, the same glob)"
        )
    if place.unexplained:
        raise ValueError(
            f"the corpus {described} has {len(place.unexplained)} rows that the embed job "
            f"neither embedded nor rejected (first: {place.unexplained[0]}); the corpus changed "
            "after it was embedded, or it is another corpus"
        )


class _Placement:
    """The scan's state: each embedded id's first row, the wanted texts and what is not
    embedded."""

    def __init__(self, index, want_text, n, rejected_ids, value_field) -> None:
        self.index, self.want_text, self.value_field = index, want_text, value_field
        self.positions = np.full((n, 2), -1, np.int64)
        self.values = None if value_field is None else np.full(n, np.nan)
        self.texts: dict[str, str] = {}
        self.rows = self.not_embedded = 0
        self.unexplained: list[str] = []
        self._rejected_ids = rejected_ids
        self._known_rejections: set[str] | None = None

    def wants_any(self, ids: list[str]) -> bool:
        """Whether the text of any of ``ids`` is wanted."""
        rows = [row for row in map(self.index.get, ids) if row is not None]
        return bool(rows) and bool(self.want_text[rows].any())

    def record(self, item_id: str, number: int, path: str, line: int, item=None) -> bool:
        """Place one record of file ``number``; whether its text is wanted (its first row)."""
        row = self.index.get(item_id)
        if row is not None and self.positions[row, 0] < 0:
            self.positions[row] = (number, line)
            if self.values is not None:
                self.values[row] = _number(dict(item.fields).get(self.value_field), item)
            return bool(self.want_text[row])
        self.not_embedded += 1
        if row is None:
            if self._known_rejections is None:
                self._known_rejections = self._rejected_ids()
            if item_id not in self._known_rejections:
                self.unexplained.append(f"{path}:{line} (id {item_id!r})")
        return False


def _number(value: str | None, item: CorpusRecord) -> float:
    """A metadata value as a number; NaN when the field is missing or empty."""
    if value is None or not value.strip():
        return float("nan")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(
            f"{item.source} (id {item.id!r}): the ranking column holds {value!r}, not a number"
        ) from None
    if not np.isfinite(number):
        raise ValueError(f"{item.source} (id {item.id!r}): the ranking column holds {value!r}")
    return number


@dataclass
class ApplyCounts:
    """What writing the deduplicated corpus did."""

    rows: int = 0  # rows read
    written: int = 0  # embedded rows kept
    removed: int = 0  # embedded rows removed as duplicates
    not_embedded: int = 0  # rows not among the embeddings (listed in corpus_rejected.parquet)
    files: list[dict] = field(default_factory=list)  # per input file: path, output, counts

    def to_json(self) -> dict:
        """For the manifest."""
        return field_record(self, {"rows": "rows_read"})


def write_deduplicated_corpus(
    scan: CorpusScan,
    index: dict[str, int],
    kept: np.ndarray,
    directory: str,
    rejected_path: str,
) -> ApplyCounts:
    """Write the kept rows of every corpus file under ``directory``, and the rows that were not
    embedded to ``rejected_path`` (the ``_errors/`` schema, ERRORS_SCHEMA).

    Args:
        scan: the corpus as scanned (same files and spec).
        index: ``{id: item row}`` of every embedded id.
        kept: ``(n,)`` bool, items to keep.
        directory: output folder; each file goes to its path relative to the glob.
        rejected_path: the Parquet file listing rows not embedded, with the reason.

    Raises:
        ValueError: two input files would be written to the same output path.
    """
    outputs = [join_relative(directory, prefix) for _, prefix, _ in scan.files]
    if len(set(outputs)) != len(outputs):
        raise ValueError(
            f"the corpus {scan.pattern} has files with the same relative name; they cannot be "
            f"written side by side under {directory}"
        )
    counts = ApplyCounts()
    rejected: list[dict] = []
    for number, ((path, prefix, _), output) in enumerate(zip(scan.files, outputs, strict=True)):
        before = (counts.rows, counts.written, counts.removed, counts.not_embedded)

        def decide(item, number=number) -> bool:
            counts.rows += 1
            reason = _not_embedded_reason(item, number, scan, index)
            if reason is not None:
                counts.not_embedded += 1
                rejected.append(_rejection(item, reason))
                return False
            if kept[index[item.id]]:
                counts.written += 1
                return True
            counts.removed += 1
            return False

        _filter_file(path, prefix, scan.spec, output, decide)
        after = (counts.rows, counts.written, counts.removed, counts.not_embedded)
        delta = [a - b for a, b in zip(after, before, strict=True)]
        counts.files.append(
            {
                "path": path,
                "output": output,
                "rows": delta[0],
                "written": delta[1],
                "removed": delta[2],
                "not_embedded": delta[3],
            }
        )
    with FileSystems.create(rejected_path) as handle:
        pq.write_table(pa.Table.from_pylist(rejected, schema=ERRORS_SCHEMA), handle)
    return counts


def join_relative(directory: str, relative: str) -> str:
    """``directory/relative`` for a relative path with ``/`` separators, on any filesystem."""
    parts = [part for part in posixpath.normpath(relative).split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"cannot place the corpus file {relative!r} under {directory}")
    return FileSystems.join(directory, *parts)


def _not_embedded_reason(item, number: int, scan: CorpusScan, index: dict[str, int]):
    if isinstance(item, RejectedRow):
        return item.reason
    row = index.get(item.id)
    if row is None:
        return NOT_EMBEDDED_REASON
    file_number, line = scan.positions[row]
    if (file_number, line) != (number, _row_number(item.source)):
        first = f"{scan.files[file_number][0]}:{line}"
        return f"duplicate id (first seen at {first})"
    return None


def _rejection(item: CorpusRecord | RejectedRow, reason: str) -> dict:
    if isinstance(item, RejectedRow):
        return item.to_dict()
    return {"id": item.id, "source": item.source, "reason": reason, "excerpt": excerpt(item.text)}


def _filter_file(
    path: str, prefix: str, spec: CorpusSpec, output: str, decide: Callable[[object], bool]
) -> None:
    """Copy the rows of one file for which ``decide(item)`` is True to ``output``.

    The file is read twice side by side: once parsed into items, once as raw rows, matched by
    row number (the number in each item's ``source``).
    """
    fmt = detect_format(path, spec.fmt)
    with open_decompressed(path) as parsed_stream, open_decompressed(path) as raw_stream:
        items = read_corpus_file(parsed_stream, path, spec, prefix)
        if fmt == "parquet":
            _filter_parquet(raw_stream, items, output, decide)
            return
        with _compressed_writer(output) as sink:
            raw = raw_rows(raw_stream, path, spec)
            header = next(raw)
            if header is not None:
                sink.write(_encode(header, fmt))
            wanted = _wanted_rows(items, decide)
            target = next(wanted, None)
            for number, values in raw:
                while target is not None and target < number:
                    target = next(wanted, None)
                if target == number and values is not None:
                    sink.write(_encode(values, fmt))
            for _ in wanted:  # decide() on the rest too, so every row is counted
                pass


def _wanted_rows(items: Iterator, decide: Callable[[object], bool]) -> Iterator[int]:
    for item in items:
        keep = decide(item)
        if keep:
            yield _row_number(item.source)


def _encode(values, fmt: str) -> bytes:
    if fmt in ("txt", "jsonl"):
        return values.encode("utf-8", "surrogateescape")  # the line as read, with its ending
    if fmt == "tsv":
        return ("\t".join(values) + "\n").encode("utf-8", "surrogateescape")
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(values)
    return buffer.getvalue().encode("utf-8", "surrogateescape")


def _filter_parquet(raw_stream: BinaryIO, items, output: str, decide) -> None:
    parquet = pq.ParquetFile(raw_stream)
    keep = np.fromiter((decide(item) for item in items), bool)
    with FileSystems.create(output) as handle:
        writer = pq.ParquetWriter(handle, parquet.schema_arrow)
        start = 0
        for batch in parquet.iter_batches(batch_size=8192):
            mask = keep[start : start + batch.num_rows]
            start += batch.num_rows
            writer.write_table(pa.Table.from_batches([batch.filter(pa.array(mask))]))
        writer.close()


@contextmanager
def _compressed_writer(path: str):
    """A binary writer to ``path`` that compresses for ``.gz`` / ``.bz2`` names."""
    raw = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
    try:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as sink:
                yield sink
        elif path.endswith(".bz2"):
            with bz2.BZ2File(raw, mode="wb") as sink:
                yield sink
        else:
            yield raw
    finally:
        raw.close()


def _row_number(source: str) -> int:
    return int(source.rpartition(":")[2])


def _describe(spec: CorpusSpec) -> str:
    id_field = f"--id-field {spec.id_field}" if spec.id_field else "derived file:row ids"
    return f"--text-field {spec.text_field}, {id_field}"


def apply_corpus(
    folder: str, scan: CorpusScan, index: dict[str, int], kept_rows: np.ndarray, n_removed: int
) -> dict:
    """Write the deduplicated corpus into ``folder`` (``corpus/`` and the rejected rows); check
    that its counts agree with the corpus rows kept (``kept_rows``, ``(n,)`` bool) and removed.

    Raises:
        JobFailedError: the counts disagree (nothing is published).
    """
    counts = write_deduplicated_corpus(
        scan,
        index,
        kept_rows,
        join(folder, CORPUS_DIR),
        join(folder, REJECTED_FILE),
    )
    kept = int(kept_rows.sum())
    if (
        counts.rows != counts.written + counts.removed + counts.not_embedded
        or counts.written != kept
        or counts.removed != n_removed
        or counts.rows != scan.rows
    ):
        raise JobFailedError(
            f"the deduplicated corpus does not add up: read {counts.rows} rows (scan: "
            f"{scan.rows}), wrote {counts.written} (kept: {kept}), removed {counts.removed} "
            f"(expected {n_removed}), {counts.not_embedded} not embedded; nothing was "
            "published and the previous output is unchanged"
        )
    return counts.to_json()
