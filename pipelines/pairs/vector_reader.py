"""The vectors the pairs stage reads: :class:`VectorReader` streams the embeddings shards
(L2-normalising when the embeddings manifest does not promise unit float32 rows),
:meth:`VectorReader.scan` checks the launcher's preconditions in one pass (ids unique, values
finite) and picks sample rows on the way, and :meth:`VectorReader.load_sorted` is what an
exact-mode worker holds: every vector, in id order, so that "ties by index" in the maths is
"ties by id" in the output. Loads no torch (the launcher reads while the search modules import).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.io.embeddings import embedding_matrix, parquet_source, stream_parquet
from sbert_pipeline.vectors.checks import require_finite
from sbert_pipeline.vectors.precision import normalize_rows


def needs_normalizing(manifest: dict) -> bool:
    """Whether rows must be L2-normalised here: unless the embed stage wrote unit float32 rows.

    Rows stored as float16 are re-normalised too: rounding leaves their norms ~1e-3 off 1.
    """
    return not (manifest.get("normalized") and manifest.get("dtype", "float32") == "float32")


@dataclass(frozen=True)
class Scan:
    """What one launcher pass over the embeddings found.

    Attributes:
        count: rows read.
        picked: for each name asked for, ``(row numbers, ids, (m, d) vectors)`` of the rows
            chosen, in row order (vectors prepared as the workers prepare them).
    """

    count: int
    picked: dict[str, tuple[np.ndarray, list[str], np.ndarray]]
    loaded: tuple[pa.Array, np.ndarray] | None = None  # with keep: as load_sorted gives them
    id_bytes: int = 0  # the ids' size in Arrow (values and offsets), for temporary disk


@dataclass(frozen=True)
class VectorReader:
    """The embeddings shards of a pairs job, read the same way in the launcher and the workers.

    Rows are numbered across all shards in order (input directories, then shards); a plain
    value, so a worker can carry it.
    """

    shards: tuple[str, ...]
    dim: int
    normalize: bool
    batch_size: int = 65536

    def batches(
        self, writable: bool = True, threads: bool = True
    ) -> Iterator[tuple[pa.Array, np.ndarray]]:
        """``(ids, (b, d) float32 vectors)`` per record batch, in row order."""
        for path in self.shards:
            yield from self.read_shard(path, writable, threads)

    def read_shard(
        self, path: str, writable: bool = True, threads: bool = True
    ) -> Iterator[tuple[pa.Array, np.ndarray]]:
        """``(ids, vectors)`` batches of one shard; without ``writable`` the vectors may be
        read-only views of Arrow's buffers (for a caller that copies them anyway); without
        ``threads`` Arrow decodes on the calling thread only."""
        with parquet_source(path) as source:
            for batch in stream_parquet(source).iter_batches(
                batch_size=self.batch_size, columns=["id", "embedding"], use_threads=threads
            ):
                ids = _plain(batch.column("id"))
                yield ids, self.prepare(_embedding_view(batch.column("embedding")), writable)

    def prepare(self, vectors: np.ndarray, writable: bool = True) -> np.ndarray:
        """float32 rows, L2-normalised when the embeddings are not unit float32 rows already."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if self.normalize:
            return normalize_rows(vectors)
        # Arrow hands out read-only views; torch wants arrays it may write to.
        return vectors if vectors.flags.writeable or not writable else vectors.copy()

    def scan(self, picks: dict[str, np.ndarray], keep: bool = False) -> Scan:
        """Check every row and collect the rows ``picks`` name (sorted row numbers per name);
        with ``keep``, also every id and vector as :meth:`load_sorted` gives them (one read
        where the launcher searches them itself).

        Raises:
            ValueError: an id occurs twice (results name items by id, so ids must be unique),
                a null id, or a vector with NaN or infinite values; the message names one.
        """
        seen: list[pa.Array] = []
        order = places = kept = None
        if keep:
            order, places = self._id_order()
            kept = np.empty((len(order), self.dim), np.float32)
        found: dict[str, tuple[list, list, list]] = {name: ([], [], []) for name in picks}
        offset = 0
        # Kept vectors are copied once, straight into their sorted places (found by a first
        # read of the id column alone), so they are read as views and no second copy of all
        # vectors is ever held.
        # Arrow decodes on this thread alone: the launcher scans while it imports the search
        # modules on the other core, and Arrow's own threads would only contend with that
        # (measured here: 0.26 CPU-s for 100k x 384 on one thread, 0.66 with Arrow's pool).
        for ids, vectors in self.batches(writable=not keep, threads=False):
            if ids.null_count:
                raise ValueError(f"row {offset + _first(ids.is_null())}: the id is null")
            require_finite(vectors, ids)
            for name, rows in picks.items():
                lo, hi = np.searchsorted(rows, [offset, offset + len(ids)])
                local = rows[lo:hi] - offset
                found[name][0].append(rows[lo:hi])
                found[name][1].extend(ids.take(pa.array(local)).to_pylist())
                found[name][2].append(vectors[local])
            seen.append(ids)
            if kept is not None:
                kept[places[offset : offset + len(ids)]] = vectors
            offset += len(ids)
        _require_unique(seen)
        picked = {
            name: (
                np.concatenate(rows) if rows else np.zeros(0, np.int64),
                names,
                np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32),
            )
            for name, (rows, names, parts) in found.items()
        }
        loaded = None
        if kept is not None:
            ids = pa.concat_arrays(seen) if seen else pa.array([], pa.string())
            loaded = (ids.take(pa.array(order, pa.int64())), kept)
        return Scan(offset, picked, loaded, sum(ids.nbytes for ids in seen))

    def load_sorted(self) -> tuple[pa.Array, np.ndarray]:
        """Every id (ascending) and its vector: ``(ids, (n, d) float32)``.

        Memory: ``n * d * 4`` bytes for the vectors (each batch goes straight to its rows'
        sorted places, found by a first read of the id column alone), plus the ids.
        """
        order, places = self._id_order()
        vectors = np.empty((len(order), self.dim), np.float32)
        ids, offset = [], 0
        for batch_ids, batch in self.batches(writable=False):  # copied into place below
            ids.append(batch_ids)
            vectors[places[offset : offset + len(batch)]] = batch
            offset += len(batch)
        if not ids:
            return pa.array([], pa.string()), vectors
        return pa.concat_arrays(ids).take(pa.array(order)), vectors

    def _id_order(self) -> tuple[np.ndarray, np.ndarray]:
        """``(order, places)`` of every row (numbered across shards): the rows in id order, and
        each row's place in that order. Reads the id column only."""
        ids = []
        for path in self.shards:
            with parquet_source(path) as source:
                for batch in pq.ParquetFile(source).iter_batches(
                    batch_size=self.batch_size, columns=["id"], use_threads=False
                ):
                    ids.append(_plain(batch.column("id")))
        if not ids:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        order = pc.sort_indices(pa.concat_arrays(ids)).to_numpy()
        places = np.empty_like(order)
        places[order] = np.arange(len(order))
        return order, places


def _embedding_view(column: pa.Array) -> np.ndarray:
    """The embedding column as ``(b, d)`` float32, a read-only view of Arrow's buffer where it
    holds float32 values without nulls (``embedding_matrix`` flattens the lists, which copies
    them: 0.28 CPU-s per 100k x 384 here), else :func:`embedding_matrix`'s copy."""
    if column.null_count or column.type.value_type != pa.float32():
        return embedding_matrix(column)
    dim = column.type.list_size
    values = column.values.slice(column.offset * dim, len(column) * dim)
    return values.to_numpy(zero_copy_only=False).reshape(-1, dim)


def _plain(ids: pa.Array) -> pa.Array:
    """Ids as ``string`` (Parquet may hand back ``large_string`` or dictionary arrays)."""
    if pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_decode()
    return ids.cast(pa.string()) if ids.type != pa.string() else ids


def _first(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


def _require_unique(parts: Sequence[pa.Array]) -> None:
    if not parts:
        return
    ids = pa.concat_arrays(list(parts))
    if len(pc.unique(ids)) == len(ids):
        return
    counts = pc.value_counts(ids)
    repeated = counts.filter(pc.greater(counts.field("counts"), 1))
    example = repeated[0]["values"].as_py()
    raise ValueError(
        f"{len(repeated)} ids occur more than once in the embeddings (e.g. {example!r}); "
        "pairs name items by id, so ids must be unique (re-embed with distinct ids, or do not "
        "pass the same embeddings twice)"
    )
