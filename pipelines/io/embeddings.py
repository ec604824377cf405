"""Reading ``embeddings/`` datasets back: manifest checks, row counts, streamed or whole.

Every later stage (index, clusters, pairs) starts here, so a half-written directory or one
embedded by another model is refused the same way everywhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sbert_pipeline.io.atomic import is_local_path
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import join, listed_parts, read_manifest
from sbert_pipeline.vectors.checks import require_finite

# The model fields of an embeddings manifest, which later stages copy into theirs: what made
# the vectors (the model, its settings, the prompt prepended and the dimensions kept).
MODEL_FIELDS = (
    "model_id",
    "weights_sha256",
    "dim",
    "full_dim",
    "truncate_dim",
    "pooling",
    "include_prompt",
    "normalized",
    "max_seq_length",
    "prompt",
    "prompt_name",
)
# Recorded but not compared: where the model was loaded from, the name of the prompt (its text
# is compared) and how the dimension came about (``dim`` and the weights are compared).
_NOT_COMPARED = frozenset({"model_id", "prompt_name", "full_dim", "truncate_dim"})
# What a field a manifest lacks means: manifests written before prompts were applied (and
# include_prompt read) embedded every text without a prompt.
_WHEN_ABSENT = {"prompt": "", "include_prompt": True}


class IncompatibleEmbeddingsError(ValueError):
    """Embeddings (or an index and a query encoder) come from different models or settings."""


def shard_paths(directory: str, prefix: str = "part") -> list[str]:
    """The Parquet shards ``{prefix}-*.parquet`` directly in ``directory``, sorted."""
    pattern = join(directory, f"{prefix}-*.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


@contextlib.contextmanager
def parquet_source(path: str) -> Iterator[str | object]:
    """What ``pyarrow.parquet`` reads ``path`` from: a local file by its name, so Arrow reads it
    with its own I/O (in parallel, without taking Python's lock for every read, which a Python
    file object makes it do), else a handle of the Beam filesystem of its scheme."""
    if is_local_path(path):
        yield path.removeprefix("file://")
        return
    with FileSystems.open(path) as handle:
        yield handle


# Streaming reads page by page: without it Arrow reads each row group's column chunks whole
# (pre-buffered) before decoding, which held ~0.25 GiB more than the batch being read for
# 15 MB row groups (2M x 384 vectors here); 1 MiB reads cost no measurable time on local disk.
STREAM_BUFFER_BYTES = 1 << 20


def stream_parquet(source: str | object) -> pq.ParquetFile:
    """A Parquet file opened for reading in batches with memory bounded by the batch: no
    pre-buffering of whole row groups, pages read through a :data:`STREAM_BUFFER_BYTES`
    buffer. ``source`` is what :func:`parquet_source` yields."""
    return pq.ParquetFile(source, pre_buffer=False, buffer_size=STREAM_BUFFER_BYTES)


def count_rows(paths: list[str]) -> int:
    """Total rows of Parquet files, from their footers (no data is read)."""
    total = 0
    for path in paths:
        with parquet_source(path) as source:
            total += pq.ParquetFile(source).metadata.num_rows
    return total


def embedding_matrix(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed-size-list embedding column as a float32 ``(N, d)`` array, without Python loops.

    A float32 column without nulls (what the embed stage writes) comes back as a read-only view
    of Arrow's buffer, no copy; chunked columns and float16 values are copied."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    dim = column.type.list_size
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(-1, dim).astype(np.float32, copy=False)


def require_one_model(datasets: list[EmbeddingsDataset]) -> None:
    """Refuse embeddings that different models made (see :func:`require_compatible`).

    Raises:
        IncompatibleEmbeddingsError: naming the first dataset and the first that differs.
    """
    for other in datasets[1:]:
        require_compatible(
            datasets[0].manifest, other.manifest, f"{datasets[0].directory} and {other.directory}"
        )


def require_compatible(expected: dict, actual: dict, what: str) -> None:
    """Raise ``IncompatibleEmbeddingsError`` naming every model field on which two manifests differ.

    A model is its weights (``weights_sha256``) and settings, not where it was loaded from: an
    identical copy of a model folder elsewhere is the same model, so ``model_id`` (a path or
    name) is recorded but not compared. Vectors made with different prompt texts or kept to
    different dimensions (``dim``) differ too. A field missing (or null) on either side is a
    difference, an unknown model is not assumed to match; only a missing ``prompt`` is read as
    none (and ``include_prompt`` as true), which is how manifests from before prompts embedded.

    Args:
        expected, actual: manifests (or ``SentenceEncoder.describe()`` dicts).
        what: how to name the pair in the message, e.g. ``"index vs query encoder"``.
    """
    differences = []
    for field in MODEL_FIELDS:
        if field in _NOT_COMPARED:
            continue
        known = [field in manifest or field in _WHEN_ABSENT for manifest in (expected, actual)]
        left, right = (
            manifest.get(field, _WHEN_ABSENT.get(field)) for manifest in (expected, actual)
        )
        if not all(known) or left is None or left != right:
            shown = [
                repr(v) if k else "'missing'" for v, k in zip((left, right), known, strict=True)
            ]
            differences.append(f"{field}: {shown[0]} vs {shown[1]}")
    if differences:
        raise IncompatibleEmbeddingsError(
            f"{what} come from different models or settings ({'; '.join(differences)})"
        )


# Digest characters shown when two versions of an embeddings folder are named.
SHOWN_DIGEST = 12


def version_digest(manifest: dict) -> str:
    """The identity of one version of an embeddings input: the sha256 of its manifest as
    sorted JSON. A new embed run (or incremental run) writes another manifest (its ``created``,
    its parts' digests), so it is another version; a copy of the folder elsewhere is the same.
    Computed from the dict, so a manifest recorded by a later stage gives the same digest."""
    text = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def describe_version(manifest: dict | None, digest: str | None = None) -> str:
    """A version in words for messages: its creation time (when recorded) and digest prefix
    (``digest``, else that of ``manifest``)."""
    digest = digest or version_digest(manifest or {})
    created = (manifest or {}).get("created")
    digest = f"manifest digest {digest[:SHOWN_DIGEST]}"
    return f"created {created}, {digest}" if created else digest


@dataclass(frozen=True)
class EmbeddingsDataset:
    """A complete ``embeddings/`` directory: its manifest and shards.

    Example:
        >>> data = EmbeddingsDataset.open("out/embeddings")
        >>> for ids, vectors in data.batches(65536):  # bounded memory
        ...     ...
        >>> ids, vectors = data.load()  # everything, (N, d) float32
    """

    directory: str
    manifest: dict
    shards: tuple[str, ...]

    @classmethod
    def open(cls, directory: str) -> EmbeddingsDataset:
        """Open a finished embed output: exactly the shards its manifest lists.

        Raises:
            FileNotFoundError: no manifest (missing, or its run did not finish).
            CorruptOutputError: the manifest is unreadable or the files disagree with it.
        """
        manifest = read_manifest(directory)
        if manifest.get("kind", "embeddings") != "embeddings":
            raise ValueError(f"{directory} holds {manifest.get('kind')!r}, not embeddings")
        listed = listed_parts(directory, manifest)
        shards = tuple(listed if listed is not None else shard_paths(directory))
        return cls(directory, manifest, shards)

    @classmethod
    def open_many(cls, directories: list[str]) -> list[EmbeddingsDataset]:
        """Open several directories and check that one model made them all."""
        datasets = [cls.open(directory) for directory in directories]
        require_one_model(datasets)
        return datasets

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return int(self.manifest["dim"])

    @property
    def count(self) -> int:
        """Number of embedded rows (from the Parquet footers)."""
        return count_rows(list(self.shards))

    @property
    def has_text(self) -> bool:
        """Whether the shards carry the ``text`` column."""
        return bool(self.manifest.get("keep_text"))

    def batches(
        self, batch_size: int = 65536, columns: tuple[str, ...] = ()
    ) -> Iterator[tuple[list[str], np.ndarray] | tuple[list[str], np.ndarray, pa.RecordBatch]]:
        """Stream ``(ids, vectors)`` (plus the record batch when ``columns`` asks for more)."""
        wanted = ["id", "embedding", *columns]
        for path in self.shards:
            with parquet_source(path) as source:
                for batch in stream_parquet(source).iter_batches(
                    batch_size=batch_size, columns=wanted
                ):
                    ids = batch.column("id").to_pylist()
                    vectors = embedding_matrix(batch.column("embedding"))
                    require_finite(vectors, ids, where=path)
                    yield (ids, vectors, batch) if columns else (ids, vectors)
                    del batch, ids, vectors  # not held while the next batch is read

    def load(self) -> tuple[list[str], np.ndarray]:
        """All ids and vectors in memory: ``(ids, (N, d) float32)``."""
        ids: list[str] = []
        parts: list[np.ndarray] = []
        for batch_ids, vectors in self.batches():
            ids.extend(batch_ids)
            parts.append(vectors)
        matrix = np.concatenate(parts) if parts else np.zeros((0, self.dim), np.float32)
        return ids, matrix

    def texts(self) -> dict[str, str]:
        """``{id: text}`` when the embeddings were written with ``--keep-text``, else empty."""
        if not self.has_text:
            return {}
        out: dict[str, str] = {}
        for path in self.shards:
            with FileSystems.open(path) as handle:
                table = pq.read_table(handle, columns=["id", "text"])
            out.update(
                zip(table.column("id").to_pylist(), table.column("text").to_pylist(), strict=True)
            )
        return out


def all_shards(datasets: Sequence[EmbeddingsDataset]) -> list[str]:
    """Every embeddings shard of the inputs, in input order."""
    return [path for dataset in datasets for path in dataset.shards]
