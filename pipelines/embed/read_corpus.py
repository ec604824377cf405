"""Beam transforms that read a corpus: ReadCorpus and RejectDuplicateIds.

Both emit one PCollection of ``CorpusRecord | RejectedRow`` items and split it with Filters,
not with tagged outputs: the Dask runner does not route tagged outputs, and a split by type
costs little next to inference.

A damaged input file (truncated or corrupt ``.gz``/``.bz2``, data after the last compressed
stream, a corrupt or empty Parquet file) never fails a worker with a traceback: its rows up to
the damage are kept, and its ledger entry says where it broke. With ``on_bad_file="fail"`` (the
default) :func:`read_ledger` then refuses the run naming the file; with ``"skip"`` the rest of
the file is one rejected row (source: the path) and counts as one row read.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.metrics import Metrics
from sbert_pipeline.io.corpus_fields import check_corpus_fields
from sbert_pipeline.io.corpus_files import match_corpus, open_decompressed
from sbert_pipeline.io.corpus_reader import (
    CorpusRecord,
    CorpusSpec,
    DamagedFileError,
    RejectedRow,
    describe_damage,
    read_corpus_file,
)
from sbert_pipeline.io.counters import METRICS_NAMESPACE
from sbert_pipeline.io.filesystems import FileSystems, pattern_regex, split_pattern
from sbert_pipeline.io.output_dir import ATTEMPTS, MANIFEST
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.vectors.progress import EMBED_PROGRESS, shared_progress

from sbert_core.errors import DataFileError
from sbert_core.tabular import detect_format

RECORDS, REJECTED, READS = "records", "rejected", "reads"
READ_LEDGER = "_reads"


@dataclass(frozen=True)
class FileRead:
    """Emitted after a whole file was read: how many rows it had (records + rejections).

    These go to a small ledger in the output directory, so the launcher can check that every
    input file was read to its end and that rows read == embedded + rejected, on any runner
    (some, like Dask, report no metrics).
    """

    path: str
    rows: int
    damage: str | None = None  # what stopped the read, for a damaged file
    fatal: bool = False  # the damage fails the run (on_bad_file="fail")


def _is_record(item) -> bool:
    return isinstance(item, CorpusRecord)


def _is_rejected(item) -> bool:
    return isinstance(item, RejectedRow)


def _is_file_read(item) -> bool:
    return isinstance(item, FileRead)


def split_by_type(items, label: str, *, with_reads: bool = False) -> dict:
    """Split a mixed PCollection into ``records``, ``rejected`` (and ``reads``) by item type."""
    split = {
        RECORDS: items | f"{label}Records" >> beam.Filter(_is_record),
        REJECTED: items | f"{label}Rejected" >> beam.Filter(_is_rejected),
    }
    if with_reads:
        split[READS] = items | f"{label}FileReads" >> beam.Filter(_is_file_read)
    return split


class _ReadFileFn(beam.DoFn):
    """Reads one corpus file into records and rejections, counting both."""

    def __init__(self, spec: CorpusSpec) -> None:
        self._spec = spec
        self._read = Metrics.counter(METRICS_NAMESPACE, "read")
        self._rejected = Metrics.counter(METRICS_NAMESPACE, "rejected")

    def process(
        self, file: tuple[str, str, int]
    ) -> Iterator[CorpusRecord | RejectedRow | FileRead]:
        path, id_prefix, _ = file
        rows = rejected = 0
        try:
            with open_decompressed(path) as stream:
                for item in read_corpus_file(stream, path, self._spec, id_prefix):
                    rows += 1
                    self._read.inc()
                    if isinstance(item, RejectedRow):
                        self._rejected.inc()
                        rejected += 1
                    yield item
        except DamagedFileError as err:
            damage = err.detail
        except OSError as err:  # opening failed: the file vanished or cannot be read
            damage = describe_damage(err)
        else:
            shared_progress(EMBED_PROGRESS, "texts").add_total(rows - rejected)
            yield FileRead(path, rows)
            return
        shared_progress(EMBED_PROGRESS, "texts").add_total(rows - rejected)
        if self._spec.on_bad_file != "skip":
            yield FileRead(path, rows, damage, fatal=True)
            return
        # The unreadable rest of the file is one rejected row, so read == embedded + rejected.
        self._read.inc()
        self._rejected.inc()
        reason = f"damaged file, skipped after {rows} rows: {damage}"
        yield RejectedRow(None, path, reason, "")
        yield FileRead(path, rows + 1, damage)


class ReadCorpus(beam.PTransform):
    """Glob of corpus files -> ``{"records": ..., "rejected": ..., "reads": FileRead}``.

    Files are matched when the pipeline is built (so a bad glob fails at once) and read one
    per element, using only Create and ParDo, which every runner translates.
    """

    def __init__(
        self, pattern: str, spec: CorpusSpec, files: list[tuple[str, str, int]] | None = None
    ) -> None:
        """Match the files and check that each one's format is known and, for files matched
        here, that the first records hold the text and id fields.

        Args:
            pattern: the corpus glob.
            spec: how rows are read.
            files: read exactly these ``(path, id prefix, bytes)`` (some of what ``pattern``
                matched, as :func:`~sbert_pipeline.io.corpus_files.match_corpus` gives them) instead
                of matching ``pattern`` again (an incremental embed's new and changed files).

        Raises:
            FileNotFoundError: nothing matches ``pattern``.
            DataFileError: a file's format cannot be told from its extension, or its first
                records lack the text or id field (naming the fields it has).
        """
        super().__init__()
        self.files = match_corpus(pattern) if files is None else list(files)
        for path, _, _ in self.files:
            detect_format(path, spec.fmt)
        if files is None:  # given files were matched, and checked, by the caller
            check_corpus_fields(self.files, spec)
        self._spec = spec

    @property
    def total_bytes(self) -> int:
        """Size of the matched files on disk (compressed size for compressed files)."""
        return sum(size for _, _, size in self.files)

    def expand(self, pbegin):
        items = (
            pbegin
            | "ListFiles" >> beam.Create(self.files, reshuffle=False)
            | "ReadFiles" >> beam.ParDo(_ReadFileFn(self._spec))
        )
        return split_by_type(items, "Read", with_reads=True)


def _source_order(record: CorpusRecord) -> tuple[str, int]:
    path, _, row = record.source.rpartition(":")
    return path, int(row) if row.isdigit() else -1


def _ledger_entry(directory: str, path: str) -> str:
    # Named by a hash of the input path (which the entry holds), never by the input's own name:
    # that may hold glob characters, or be too long for a file name once prefixed.
    digest = hashlib.sha256(os.fsencode(path)).hexdigest()[:32]
    return FileSystems.join(directory, READ_LEDGER, f"{digest}.json")


class _RecordReadFn(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, read: FileRead) -> Iterator[str]:
        entry = _ledger_entry(self._directory, read.path)
        content = {"path": read.path, "rows": read.rows}
        if read.damage is not None:
            content.update(damage=read.damage, fatal=read.fatal)
        with FileSystems.create(entry, mime_type="application/json") as handle:
            handle.write(json.dumps(content).encode("utf-8"))
        yield entry


class RecordReads(beam.PTransform):
    """FileRead -> one small JSON entry per input file under ``DIR/_reads/`` (idempotent)."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self._directory = directory

    def expand(self, reads):
        return reads | "WriteLedger" >> beam.ParDo(_RecordReadFn(self._directory))


def read_ledger(directory: str) -> dict[str, int]:
    """``{input path: rows read}`` from the ledger that :class:`RecordReads` wrote.

    Raises:
        DataFileError: an input file was damaged and ``on_bad_file`` was ``"fail"``; the
            message names the first such file and says how to go on.
    """
    pattern = FileSystems.join(directory, READ_LEDGER, "*.json")
    entries = {}
    fatal = []
    for match in FileSystems.match([pattern])[0].metadata_list:
        with FileSystems.open(match.path) as handle:
            entry = json.loads(handle.read().decode("utf-8"))
        entries[entry["path"]] = int(entry["rows"])
        if entry.get("fatal"):
            fatal.append(entry)
    if fatal:
        first = min(fatal, key=lambda entry: entry["path"])
        more = f" (and {len(fatal) - 1} more damaged files)" if len(fatal) > 1 else ""
        raise DataFileError(
            f"{first['path']}: damaged file, unreadable after {first['rows']} rows "
            f"({first['damage']}){more}; nothing was published. Repair or remove it, or pass "
            "--on-bad-file skip to record each damaged file as one rejected row"
        )
    return entries


def refuse_output_inside_input(
    output: str, pattern: str, files: list[tuple[str, str, int]]
) -> None:
    """Refuse an output folder that the input glob reaches (before anything is written).

    A second run would read the first run's shards as corpus (and ``--overwrite`` would
    replace input files). Refused when a matched file lies inside ``output``, or when the glob
    matches the names the job writes there (``part-*.parquet``, ``_errors/``, attempt folders).
    Local paths are compared twice: absolute as written, and as the OS resolves them (every
    symlink followed: the glob's folder, the output and each matched file), so a link to the
    input folder, or an output reached through one, is caught.

    Raises:
        ValueError: naming the output folder and the glob.
    """
    listed, rest = split_pattern(pattern)
    for resolve in (_absolute, _resolved):
        folder = resolve(output).rstrip("/") + "/"
        inside = [path for path, _, _ in files if resolve(path).startswith(folder)]
        listed_as = resolve(listed or ".").rstrip("/") + "/"
        written = pattern_regex(listed_as, rest)
        probes = [
            folder + name
            for name in (
                "part-00000-of-00001.parquet",
                f"{ERRORS_DIR}/part-00000-of-00001.parquet",
                MANIFEST,
                f"{ATTEMPTS}/run/part-00000-of-00001.parquet",
                f"{ATTEMPTS}/run/{ERRORS_DIR}/part-00000-of-00001.parquet",
            )
        ]
        if inside or any(written.match(probe) for probe in probes):
            found = f" (it already matches {inside[0]})" if inside else ""
            if resolve is _resolved:  # only through a symlink: say where the paths lead
                found += f" (through symlinks: {folder.rstrip('/')} and {listed_as}{rest})"
            raise ValueError(
                f"--output {output} is inside what --input {pattern} reads{found}: a rerun would "
                "read this job's own output as corpus; write the output outside the input glob"
            )


def _absolute(path: str) -> str:
    """``path`` absolute for local files (so ``./out`` and ``out`` compare equal)."""
    return _local(path, os.path.abspath)


def _resolved(path: str) -> str:
    """``path`` as the OS resolves it for local files: absolute, every symlink followed."""
    return _local(path, os.path.realpath)


def _local(path: str, resolve: Callable[[str], str]) -> str:
    if "://" in path:
        return path
    resolved = resolve(path)
    return resolved + "/" if path.endswith("/") and not resolved.endswith("/") else resolved


class _KeepFirstFn(beam.DoFn):
    def __init__(self) -> None:
        self._rejected = Metrics.counter(METRICS_NAMESPACE, "rejected")

    def process(
        self, keyed: tuple[str, list[CorpusRecord]]
    ) -> Iterator[CorpusRecord | RejectedRow]:
        _, records = keyed
        first, *others = sorted(records, key=_source_order)
        yield first
        if others:  # they will not be embedded
            shared_progress(EMBED_PROGRESS, "texts").add_total(-len(others))
        for record in others:
            self._rejected.inc()
            reason = f"duplicate id (first seen at {first.source})"
            yield RejectedRow(record.id, record.source, reason, record.text[:200])


class RejectDuplicateIds(beam.PTransform):
    """Keeps the first record of each id (in file, row order); later ones are rejected.

    The grouping also redistributes records across workers, like a Reshuffle.
    """

    def expand(self, records):
        items = (
            records
            | "KeyById" >> beam.Map(lambda record: (record.id, record))
            | "GroupById" >> beam.GroupByKey()
            | "KeepFirst" >> beam.ParDo(_KeepFirstFn())
        )
        return split_by_type(items, "Dedup")


class _RejectTakenFn(beam.DoFn):
    """Rejects records whose id an earlier input file already holds (loaded in ``setup``)."""

    def __init__(self, taken: tuple[tuple[str, str], ...]) -> None:
        self._taken = taken
        self._owners: dict[str, str] = {}
        self._rejected = Metrics.counter(METRICS_NAMESPACE, "rejected")

    def setup(self) -> None:
        import pyarrow.parquet as pq
        from sbert_pipeline.io.embeddings import parquet_source

        for part, input_path in self._taken:
            with parquet_source(part) as source:
                ids = pq.read_table(source, columns=["id"]).column("id").to_pylist()
            self._owners.update(dict.fromkeys(ids, input_path))

    def process(self, record: CorpusRecord) -> Iterator[CorpusRecord | RejectedRow]:
        owner = self._owners.get(record.id)
        if owner is None:
            yield record
            return
        shared_progress(EMBED_PROGRESS, "texts").add_total(-1)  # it will not be embedded
        self._rejected.inc()
        reason = f"duplicate id {record.id!r} (already embedded from {owner})"
        yield RejectedRow(record.id, record.source, reason, record.text[:200])


class RejectTakenIds(beam.PTransform):
    """Rejects records whose id is already in the given embeddings parts (an incremental embed:
    the parts of kept and earlier input files, so ids stay unique across files embedded in
    different runs; the earlier file's row stays).

    Args:
        taken: ``(part path, input file it holds)`` pairs; the reason names that file.
    """

    def __init__(self, taken: tuple[tuple[str, str], ...]) -> None:
        super().__init__()
        self._taken = taken

    def expand(self, records):
        items = records | "RejectTaken" >> beam.ParDo(_RejectTakenFn(self._taken))
        return split_by_type(items, "Taken")
