"""The corpus index: where each record sits in each corpus file, kept with a dedup version so
that the next run over the same files parses only the new and changed ones (Beam-free).

A dedup run with ``--corpus`` reads every corpus file
(:func:`sbert_pipeline.dedup.corpus.scan_corpus`) to place each embedded id (the order behind
``keep: first`` and every tie), to fetch the texts the report shows, and to check that the corpus
and the embeddings agree. A daily corpus mostly keeps its files from one run to the next, and
parsing them again is most of an incremental dedup's time (see docs/architecture.md, "Incremental
runs"). So each run also writes ``corpus_index.parquet``: for every file, the row number and id of
each record the reader gave (columns ``file``, ``row``, ``id``), and in the manifest's
``corpus.index`` the files by path, id prefix, bytes and sha256, with the rows read and the records
of each.

The next run with the same reading spec takes a file whose path, id prefix, bytes and sha256
are unchanged from the index instead of parsing it. The index file is checked against the
sha256 its manifest's commit lists before it is used; an index that cannot be used (damaged,
another spec, a folder that is not a dedup version) is logged and every file is read, as
without one. A reused file's texts come from the embeddings (``--keep-text``: the reader's
text, stored by the embed job) when they were read with the same spec; otherwise a reused file
that holds a row whose text is wanted is parsed again.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.filesystems import CompressionTypes, FileSystems
from sbert_pipeline.io.output_dir import MANIFEST, CorruptOutputError, join, read_manifest
from sbert_pipeline.io.texts import recorded_corpus_spec, texts_from_embeddings

logger = logging.getLogger(__name__)

INDEX_FILE = "corpus_index.parquet"
INDEX_SCHEMA = pa.schema(
    [("file", pa.int32(), False), ("row", pa.int64(), False), ("id", pa.string(), False)]
)

# A file as the index knows it: (path, id prefix, bytes, sha256).
FileKey = tuple[str, str, int, str]


@dataclass(frozen=True)
class FileRows:
    """What the reader gave for one corpus file.

    Attributes:
        rows: rows read (records and rejected rows).
        numbers: ``(m,)`` int64, each record's row number (1-based, as in its ``source``).
        ids: each record's id, in row order.
    """

    rows: int
    numbers: np.ndarray
    ids: list[str]


def spec_json(spec) -> dict:
    """A reading spec as the manifest records it (tuples as lists), for comparison."""
    return json.loads(json.dumps(asdict(spec)))


def embedded_texts(
    datasets: Sequence[EmbeddingsDataset], spec
) -> Callable[[set[str]], dict[str, str]] | None:
    """A function giving the texts of ids from the embeddings, when every embeddings folder
    holds its texts and was read from the corpus with ``spec`` (so its texts are the ones the
    reader gives); None otherwise."""
    if not datasets or not all(dataset.has_text for dataset in datasets):
        return None
    if any(recorded_corpus_spec(dataset.manifest) != spec for dataset in datasets):
        return None
    return lambda wanted: texts_from_embeddings(datasets, wanted)


def previous_index(output: str | None, spec) -> dict[FileKey, FileRows]:
    """The files of the corpus index in the dedup version in ``output`` that were read with
    ``spec`` (empty: none, or one that cannot be used, logged with the reason)."""
    if output is None or not FileSystems.exists(join(output, MANIFEST)):
        return {}
    try:
        return _read_index(output, spec)
    except (CorruptOutputError, FileNotFoundError, ValueError, KeyError, pa.ArrowException) as err:
        logger.warning("the corpus index in %s is not used (%s): every file is read", output, err)
        return {}


def _read_index(output: str, spec) -> dict[FileKey, FileRows]:
    manifest = read_manifest(output, verify=False)  # the one file used is checked below
    if not isinstance(manifest, dict) or manifest.get("kind") != "dedup":
        return {}
    section = (manifest.get("corpus") or {}).get("index")
    if not isinstance(section, dict):
        return {}
    if section.get("spec") != spec_json(spec):
        logger.info("the corpus index in %s was read with other settings: not used", output)
        return {}
    listed = {entry["path"]: entry for entry in manifest.get("commit", {}).get("files", [])}
    entry = listed.get(INDEX_FILE)
    if entry is None:
        raise CorruptOutputError(f"{INDEX_FILE} is not listed in the manifest's commit")
    path = join(output, INDEX_FILE)
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        data = handle.read()
    if len(data) != entry["bytes"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CorruptOutputError(f"{path} differs from the bytes and sha256 its manifest lists")
    table = pq.read_table(io.BytesIO(data))
    numbers = table.column("file").to_numpy()
    bounds = np.searchsorted(numbers, np.arange(len(section["files"]) + 1))
    rows = table.column("row").to_numpy()
    ids = table.column("id")
    out: dict[FileKey, FileRows] = {}
    for number, file in enumerate(section["files"]):
        lo, hi = int(bounds[number]), int(bounds[number + 1])
        if hi - lo != file["records"]:
            found = f"file {number} has {hi - lo} rows, not {file['records']}"
            raise CorruptOutputError(f"{path}: {found}")
        key = (file["path"], file["id_prefix"], int(file["bytes"]), file["sha256"])
        out[key] = FileRows(int(file["rows"]), rows[lo:hi].copy(), ids[lo:hi].to_pylist())
    return out


def write_index(folder: str, scan) -> dict:
    """Write ``corpus_index.parquet`` into ``folder`` (the run's attempt folder) from a
    :class:`~sbert_pipeline.dedup.corpus.CorpusScan`; returns the manifest's ``corpus.index``: the
    spec, the files (path, id prefix, bytes, sha256, rows read, records) and how the scan took
    them (``reused``, ``parsed``, ``texts_from_embeddings``)."""
    file_rows = scan.file_rows
    numbers = [np.full(len(rows.ids), number, np.int32) for number, rows in enumerate(file_rows)]
    table = pa.table(
        {
            "file": np.concatenate(numbers) if numbers else np.zeros(0, np.int32),
            "row": np.concatenate([rows.numbers for rows in file_rows]).astype(np.int64)
            if file_rows
            else np.zeros(0, np.int64),
            "id": pa.array([item for rows in file_rows for item in rows.ids], pa.string()),
        },
        schema=INDEX_SCHEMA,
    )
    with FileSystems.create(join(folder, INDEX_FILE)) as handle:
        pq.write_table(table, handle)
    return {
        "file": INDEX_FILE,
        "spec": spec_json(scan.spec),
        "files": [
            {
                "path": path,
                "id_prefix": prefix,
                "bytes": size,
                "sha256": digest,
                "rows": rows.rows,
                "records": len(rows.ids),
            }
            for (path, prefix, size), digest, rows in zip(
                scan.files, scan.digests, file_rows, strict=True
            )
        ],
        **scan.counts,
    }
