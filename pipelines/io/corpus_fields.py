"""The text and id fields checked on the first records of every corpus file, before a model
is loaded (Beam-free for local paths; other schemes open through Beam's ``FileSystems``).

A file whose first records all lack ``--text-field`` (or ``--id-field``) would have every row
rejected after the model loaded and the job ran; it is refused at once instead, naming the
fields the file has and the flag to pass. Only the start of each file is read: the CSV/TSV
header, the Parquet schema, the first :data:`SAMPLE_RECORDS` JSON objects of a JSON-lines file.
A file that cannot be read here (damaged, empty) is left to the reader, which says so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sbert_pipeline.io.corpus_files import open_decompressed
from sbert_pipeline.io.corpus_reader import DAMAGE_ERRORS, CorpusSpec, raw_rows

from sbert_core.errors import DataFileError
from sbert_core.tabular import detect_format

SAMPLE_RECORDS = 5  # JSON objects (Parquet rows) looked at per file
_SAMPLE_LINES = 50  # lines of a JSON-lines file read at most for them (bad lines skipped)
_SHOWN_FIELDS = 12  # fields a message lists
_THREADS = 8  # files opened at once (object stores answer slowly, one file at a time)


@dataclass(frozen=True)
class FieldSample:
    """The fields found at the start of one file and the string values seen in them."""

    where: str  # where they were found: "header", "columns", "first 5 records"
    fields: tuple[str, ...]
    texts: dict[str, list[str]] = field(default_factory=dict)  # string values per field


def sample_fields(path: str, spec: CorpusSpec) -> FieldSample | None:
    """The fields at the start of ``path``; None for a ``.txt`` file (one text per line, no
    fields) and for a file that is empty or cannot be read here."""
    fmt = detect_format(path, spec.fmt)
    if fmt == "txt":
        return None
    try:
        with open_decompressed(path) as stream:
            if fmt == "parquet":
                return _parquet_sample(stream)
            return _text_sample(stream, path, spec)
    except (DataFileError, *DAMAGE_ERRORS):
        return None  # the reader reports the damage with its row


def _parquet_sample(stream) -> FieldSample:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(stream)
    schema = parquet.schema_arrow
    strings = [
        item.name
        for item in schema
        if pa.types.is_string(item.type) or pa.types.is_large_string(item.type)
    ]
    texts: dict[str, list[str]] = {name: [] for name in strings}
    if len(strings) > 1 and parquet.metadata.num_rows:  # values only to choose between them
        batch = next(parquet.iter_batches(batch_size=SAMPLE_RECORDS, columns=strings))
        texts = {name: [v for v in batch.column(name).to_pylist() if v] for name in strings}
    return FieldSample("columns", tuple(schema.names), texts)


def _text_sample(stream, path: str, spec: CorpusSpec) -> FieldSample | None:
    rows = raw_rows(stream, path, spec)
    header = next(rows)
    if header is not None:  # CSV/TSV: every record has the header's fields
        texts: dict[str, list[str]] = {name: [] for name in header}
        for _, (_, values) in zip(range(SAMPLE_RECORDS), rows, strict=False):
            if isinstance(values, list) and len(values) == len(header):
                for name, value in zip(header, values, strict=True):
                    texts[name].append(value)
        return FieldSample("header", tuple(header), texts)
    records = []
    for _, (_, line) in zip(range(_SAMPLE_LINES), rows, strict=False):
        try:
            value = json.loads(line) if line is not None else None
        except (ValueError, RecursionError):  # a bad line is the reader's to reject
            continue
        if isinstance(value, dict):
            records.append(value)
            if len(records) == SAMPLE_RECORDS:
                break
    if not records:
        return None
    names = tuple(dict.fromkeys(name for record in records for name in record))
    texts = {name: [r[name] for r in records if isinstance(r.get(name), str)] for name in names}
    return FieldSample(f"first {len(records)} record(s)", names, texts)


def check_corpus_fields(files: Sequence[tuple[str, str, int]], spec: CorpusSpec) -> None:
    """Refuse a corpus file whose first records lack the text field or the id field.

    Args:
        files: ``(path, id prefix, bytes)`` as :func:`~sbert_pipeline.io.corpus_files.match_corpus`
            gives them.
        spec: the fields to find.

    Raises:
        DataFileError: naming the first such file, the fields it has and the flag to pass.
    """
    paths = [path for path, _, _ in files]
    if spec.id_field is not None:
        txt = [path for path in paths if detect_format(path, spec.fmt) == "txt"]
        if txt:
            raise DataFileError(
                f"{txt[0]}: a text file (one text per line) has no fields, so --id-field "
                f"{spec.id_field} cannot be read from it; leave --id-field out (ids are then "
                "file and row) or give the corpus as .jsonl, .csv, .tsv or .parquet"
            )
    if len(paths) > 1:
        with ThreadPoolExecutor(max_workers=min(_THREADS, len(paths))) as pool:
            samples = list(pool.map(lambda path: sample_fields(path, spec), paths))
    else:
        samples = [sample_fields(path, spec) for path in paths]
    for path, sample in zip(paths, samples, strict=True):
        if sample is not None:
            _check_sample(path, sample, spec)


def _check_sample(path: str, sample: FieldSample, spec: CorpusSpec) -> None:
    found = _listed(sample.fields)
    if spec.text_field not in sample.fields:
        guess = _text_guess(sample, spec.id_field)
        fix = (
            f"pass --text-field {guess}"
            if guess
            else "pass --text-field with the field that holds the text"
        )
        raise DataFileError(
            f"{path}: no text field {spec.text_field!r} in its {sample.where} (fields: "
            f"{found}); {fix}"
        )
    if spec.id_field is not None and spec.id_field not in sample.fields:
        guess = _id_guess(sample, spec.text_field)
        fix = f"pass --id-field {guess}" if guess else "pass --id-field with the field of ids"
        raise DataFileError(
            f"{path}: no id field {spec.id_field!r} in its {sample.where} (fields: {found}); "
            f"{fix}, or leave --id-field out (ids are then file and row)"
        )


def _listed(fields: Sequence[str]) -> str:
    shown = ", ".join(fields[:_SHOWN_FIELDS]) or "none"
    more = len(fields) - _SHOWN_FIELDS
    return shown + (f" and {more} more" if more > 0 else "")


def _text_guess(sample: FieldSample, id_field: str | None) -> str | None:
    """The field most likely to hold the text: of those with string values (not the id
    field), the one whose values are longest on average."""
    lengths = {
        name: sum(map(len, values)) / max(1, len(values))
        for name, values in sample.texts.items()
        if name != id_field and (values or len(sample.texts) == 1)
    }
    return max(lengths, key=lambda name: lengths[name]) if lengths else None


def _id_guess(sample: FieldSample, text_field: str) -> str | None:
    """The one field named like an id (``id``, ``qid``, ``doc_id``), if exactly one is."""
    named = [
        name
        for name in sample.fields
        if name != text_field and name.lower().replace("-", "_").endswith("id")
    ]
    return named[0] if len(named) == 1 else None
