"""The ``index/`` directory: FAISS index file(s), ids by position, and a manifest written last.

Layout (see docs/architecture.md, folder contracts)::

    index/
      index.faiss            the index, or for unmergeable types (HNSW) built with --shards:
      shards/*.faiss         index-SSSSS-of-NNNNN.faiss + held-out.faiss, searched together
      ids.parquet            position -> id (and the text, when the embeddings carry it)
      _manifest.json         factory, metric, tuned search parameters, recall@10, queries/s,
                             sizes and sha256 of every file, the embeddings manifest

Index files are streamed through FAISS's callback writer and reader, so they can live on any
Beam filesystem (gs://, s3://, ...) without a second copy in memory, and their sha256 is
computed on the way. Reading checks size, checksum and row counts against the manifest and
names the file at fault.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from sbert_pipeline.index.faiss_ops import faiss_message, set_search_params
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.output_dir import join, read_manifest
from sbert_pipeline.io.staged_output import StagedOutput

INDEX_FILE = "index.faiss"
IDS_FILE = "ids.parquet"
SHARDS_DIR = "shards"
# Bytes per FAISS callback: large enough that Python call overhead vanishes, small enough
# that reading a multi-GB index never holds a second full copy.
IO_CHUNK_BYTES = 1 << 22
IDS_ROW_GROUP = 65536


class CorruptIndexError(ValueError):
    """An index directory's files are unreadable or disagree with each other or the manifest."""


@dataclass(frozen=True)
class FileDigest:
    """A written file: its name relative to the index directory, size and sha256."""

    name: str
    size: int
    sha256: str


def ids_schema(with_text: bool) -> pa.Schema:
    """Schema of ``ids.parquet``: position (0..N-1, the FAISS id), id, [text]."""
    fields = [
        pa.field("position", pa.int64(), nullable=False),
        pa.field("id", pa.string(), nullable=False),
    ]
    if with_text:
        fields.append(pa.field("text", pa.string()))
    return pa.schema(fields)


def shard_file_name(shard: int, n_shards: int) -> str:
    """``shards/index-SSSSS-of-NNNNN.faiss``, relative to the index directory."""
    return f"{SHARDS_DIR}/index-{shard:05d}-of-{n_shards:05d}.faiss"


def _create(path: str):
    return FileSystems.create(
        path, mime_type="application/octet-stream", compression_type=CompressionTypes.UNCOMPRESSED
    )


def _open(path: str):
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def _size(path: str) -> int:
    return FileSystems.match([path])[0].metadata_list[0].size_in_bytes


def write_index_file(index: faiss.Index, path: str) -> tuple[int, str]:
    """Serialise ``index`` to ``path`` on any Beam filesystem; returns ``(bytes, sha256)``."""
    hasher = hashlib.sha256()
    size = 0
    with _create(path) as handle:

        def write(chunk: bytes) -> int:
            nonlocal size
            handle.write(chunk)
            hasher.update(chunk)
            size += len(chunk)
            return len(chunk)

        writer = faiss.PyCallbackIOWriter(write, IO_CHUNK_BYTES)
        faiss.write_index(index, writer)
        del writer  # drops FAISS's reference to the callback before the handle closes
    return size, hasher.hexdigest()


def read_index_file(path: str, size: int | None = None, sha256: str | None = None) -> faiss.Index:
    """Read an index file, checking its size and sha256 when given.

    Raises:
        FileNotFoundError: no such file.
        CorruptIndexError: truncated, corrupt, or not a FAISS index; the message names ``path``.
    """
    if not FileSystems.exists(path):
        raise FileNotFoundError(f"{path} does not exist; the index directory is incomplete")
    actual = _size(path)
    if size is not None and actual != size:
        raise CorruptIndexError(
            f"{path} is {actual} bytes but the manifest says {size}: the file is truncated or "
            "was replaced; rebuild the index"
        )
    hasher = hashlib.sha256()
    with _open(path) as handle:

        def read(n: int) -> bytes:
            chunk = handle.read(n)
            hasher.update(chunk)
            return chunk

        reader = faiss.PyCallbackIOReader(read, IO_CHUNK_BYTES)
        try:
            index = faiss.read_index(reader)
        except RuntimeError as err:
            raise CorruptIndexError(
                f"{path} is not a readable FAISS index (corrupt or truncated): {faiss_message(err)}"
            ) from err
        finally:
            del reader
        while chunk := handle.read(IO_CHUNK_BYTES):  # trailing bytes count for the checksum
            hasher.update(chunk)
    if sha256 is not None and hasher.hexdigest() != sha256:
        raise CorruptIndexError(
            f"{path} does not match the sha256 in the manifest: the file is corrupt; rebuild "
            "the index"
        )
    return index


def id_batches(
    data: EmbeddingsDataset, with_text: bool, batch_size: int = IDS_ROW_GROUP
) -> Iterator[tuple[list[str], list[str] | None]]:
    """``(ids, texts)`` of an embeddings dataset in row order, reading no vectors."""
    columns = ["id", "text"] if with_text else ["id"]
    for path in data.shards:
        with FileSystems.open(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(
                batch_size=batch_size, columns=columns
            ):
                texts = batch.column("text").to_pylist() if with_text else None
                yield batch.column("id").to_pylist(), texts


def in_index_order(
    batches: Iterable[tuple[list[str], list[str] | None]], held_out: np.ndarray
) -> Iterator[tuple[list[str], list[str] | None]]:
    """``(ids, texts)`` batches in index order: corpus rows without ``held_out``, then those.

    ``held_out`` (sorted corpus rows) are the queries the build measured recall with and added
    last; see ``index_build.index_order``. ``texts`` stays None when the batches have none.
    """
    offset = 0
    last_ids: list[str] = []
    last_texts: list[str | None] | None = None
    for ids, texts in batches:
        stop = offset + len(ids)
        lo, hi = np.searchsorted(held_out, [offset, stop])
        dropped = (held_out[lo:hi] - offset).tolist()
        if dropped:
            keep = np.ones(len(ids), dtype=bool)
            keep[dropped] = False
            last_ids.extend(ids[i] for i in dropped)
            ids = [value for value, kept in zip(ids, keep, strict=True) if kept]
            if texts is not None:
                last_texts = (last_texts or []) + [texts[i] for i in dropped]
                texts = [value for value, kept in zip(texts, keep, strict=True) if kept]
        offset = stop
        yield ids, texts
    if last_ids:
        yield last_ids, last_texts


def write_ids(
    path: str, batches: Iterable[tuple[list[str], list[str] | None]], with_text: bool
) -> tuple[int, int, str]:
    """Write ``ids.parquet`` from ``(ids, texts)`` batches; returns ``(rows, bytes, sha256)``."""
    schema = ids_schema(with_text)
    rows = 0
    with _create(path) as handle, pq.ParquetWriter(handle, schema) as writer:
        for ids, texts in batches:
            columns = [pa.array(np.arange(rows, rows + len(ids), dtype=np.int64)), pa.array(ids)]
            if with_text:
                columns.append(pa.array(texts, pa.string()))
            writer.write_table(
                pa.Table.from_arrays(columns, schema=schema), row_group_size=IDS_ROW_GROUP
            )
            rows += len(ids)
    return rows, _size(path), _sha256_of(path)


def _sha256_of(path: str) -> str:
    hasher = hashlib.sha256()
    with _open(path) as handle:
        while chunk := handle.read(IO_CHUNK_BYTES):
            hasher.update(chunk)
    return hasher.hexdigest()


class IdTable:
    """``ids.parquet`` read lazily: only the row groups holding the looked-up positions."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            with FileSystems.open(path) as handle:
                metadata = pq.ParquetFile(handle).metadata
        except (OSError, pa.ArrowException) as err:
            raise CorruptIndexError(f"{path} is not a readable Parquet file: {err}") from err
        self.rows = metadata.num_rows
        self.has_text = "text" in metadata.schema.names
        group_rows = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        self._starts = np.concatenate([[0], np.cumsum(group_rows, dtype=np.int64)])

    def lookup(self, positions: np.ndarray) -> tuple[list[str], list[str | None]]:
        """Ids (and texts, or Nones) at index positions, in the order given."""
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.rows):
            raise CorruptIndexError(
                f"{self.path} has {self.rows} rows; the index returned position "
                f"{int(positions.max())}"
            )
        groups = np.unique(np.searchsorted(self._starts, positions, side="right") - 1)
        columns = ["position", "id", "text"] if self.has_text else ["position", "id"]
        found: dict[int, tuple[str, str | None]] = {}
        with FileSystems.open(self.path) as handle:
            table = pq.ParquetFile(handle).read_row_groups(groups.tolist(), columns=columns)
        texts = table.column("text").to_pylist() if self.has_text else [None] * table.num_rows
        for position, id_, text in zip(
            table.column("position").to_pylist(), table.column("id").to_pylist(), texts, strict=True
        ):
            found[position] = (id_, text)
        missing = set(positions.tolist()) - found.keys()
        if missing:
            raise CorruptIndexError(f"{self.path} lacks positions {sorted(missing)[:5]}")
        wanted = positions.tolist()
        return [found[p][0] for p in wanted], [found[p][1] for p in wanted]


def commit_index_output(
    out: StagedOutput,
    *,
    index_files: list[FileDigest],
    ids_file: FileDigest,
    ids_rows: int,
    fields: dict,
) -> dict:
    """Write the manifest (the commit point) once every file is in place and consistent.

    Args:
        out: the run's hold on the index directory (from ``prepare_output``); the files are
            in its attempt area and move to the directory with the manifest.
        index_files: ``index.faiss``, or the shard files in shard order.
        ids_file: ``ids.parquet``.
        ids_rows: rows written to ``ids.parquet``.
        fields: build facts (``BuiltIndex.manifest_fields()`` plus the job's own).

    Returns:
        The manifest written.

    Raises:
        CorruptIndexError: the ids and the index disagree on the number of vectors.
    """
    if ids_rows != fields["ntotal"]:
        raise CorruptIndexError(
            f"{out.path(ids_file.name)} has {ids_rows} ids but the index holds "
            f"{fields['ntotal']} vectors; nothing was committed"
        )
    manifest = {
        "kind": "index",
        **fields,
        "layout": "single" if len(index_files) == 1 else "shards",
        "size_bytes": sum(f.size for f in index_files),
        "files": {"index": [asdict(f) for f in index_files], "ids": asdict(ids_file)},
    }
    return out.commit(manifest)


@dataclass
class LoadedIndex:
    """A searchable index with its ids and manifest."""

    index: faiss.Index
    ids: IdTable
    manifest: dict

    @property
    def metric(self) -> str:
        """``ip`` or ``l2``."""
        return self.manifest["metric"]

    @property
    def embeddings_manifest(self) -> dict:
        """The manifest of the embeddings the index was built from (model fields included)."""
        return self.manifest["embeddings"]["manifest"]


def open_index(directory: str, *, verify_checksums: bool = True) -> LoadedIndex:
    """Load an index directory, check it, and apply its tuned search parameters.

    Args:
        directory: an ``sbert index`` output.
        verify_checksums: hash the index files while reading them (a few seconds per GB).

    Raises:
        FileNotFoundError: the directory is missing or unfinished (no manifest), or a file is gone.
        CorruptIndexError: a file is truncated or corrupt, or ids and index disagree.
    """
    # The index files are checked below, with size and sha256 and messages of their own.
    manifest = read_manifest(directory, verify=False)
    if manifest.get("kind") != "index":
        raise ValueError(f"{directory} holds {manifest.get('kind')!r}, not an index")
    parts = []
    for entry in manifest["files"]["index"]:
        path = join(directory, entry["name"])
        sha256 = entry["sha256"] if verify_checksums else None
        parts.append((path, read_index_file(path, entry["size"], sha256)))
    if len(parts) == 1:
        index = parts[0][1]
    else:
        index = faiss.IndexShards(parts[0][1].d, True, True)  # threaded, successive ids
        for _, shard in parts:
            index.add_shard(shard)
    ids = IdTable(join(directory, manifest["files"]["ids"]["name"]))
    names = ", ".join(path for path, _ in parts)
    if index.ntotal != manifest["ntotal"]:
        raise CorruptIndexError(
            f"{names} hold {index.ntotal} vectors but the manifest says {manifest['ntotal']}"
        )
    if ids.rows != index.ntotal:
        raise CorruptIndexError(
            f"{ids.path} has {ids.rows} ids but {names} hold {index.ntotal} vectors: the "
            "directory is inconsistent; rebuild it with sbert index --overwrite"
        )
    if verify_checksums and _sha256_of(ids.path) != manifest["files"]["ids"]["sha256"]:
        raise CorruptIndexError(
            f"{ids.path} does not match the sha256 in the manifest: the file is corrupt or was "
            "replaced; rebuild the index"
        )
    set_search_params(index, manifest.get("search_params", {}))
    return LoadedIndex(index, ids, manifest)
