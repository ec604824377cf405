"""The inputs of a dedup run beside the ``pairs/`` folder: the embeddings the pairs were
computed from (:func:`open_embeddings`), their ids, the rows naming a field (known duplicates,
copies) and the ids the embed stage rejected."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.io.embeddings import EmbeddingsDataset, shard_paths
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import join, listed_parts
from sbert_pipeline.io.pairs_output import PairsOutput
from sbert_pipeline.io.schemas import ERRORS_DIR, LEGACY_ERRORS_DIRS


def open_embeddings(pairs: PairsOutput, override: list[str] | None) -> list[EmbeddingsDataset]:
    """The embeddings the pairs were computed from (or ``override``, the same moved), checked to
    be the model and the version the pairs recorded (:meth:`PairsOutput.open_embeddings`).

    Raises:
        FileNotFoundError: a directory is gone (name it with ``--embeddings``).
        ValueError: the pairs manifest names no embeddings and none are given.
        IncompatibleEmbeddingsError: the embeddings differ from those the pairs recorded.
        StaleEmbeddingsError: the embeddings were made again since the pairs were.
    """
    return pairs.open_embeddings(override, moved="pass --embeddings DIR")


def embedding_ids(datasets: list[EmbeddingsDataset]) -> pa.Array:
    """Every embedded id, in read order (datasets in order, shards sorted, rows in order).

    Raises:
        ValueError: an id occurs twice.
    """
    parts = []
    for dataset in datasets:
        for path in dataset.shards:
            with FileSystems.open(path) as handle:
                parts.append(pq.read_table(handle, columns=["id"]).column("id").combine_chunks())
    ids = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
    ids = ids.cast(pa.string())
    # Sorted, a repeat sits next to its twin. Arrow's hash kernels (count_distinct, unique)
    # held 0.7-1.3 GB for 5M short ids; the sort holds its (n,) order and one sorted copy.
    ordered = ids.take(pc.sort_indices(ids))
    same = pc.equal(ordered.slice(1), ordered.slice(0, max(len(ordered) - 1, 0)))
    repeats = np.flatnonzero(same.to_numpy(zero_copy_only=False))
    if len(repeats):
        distinct = len(pc.unique(ordered.take(pa.array(repeats + 1))))
        raise ValueError(
            f"{distinct} ids occur more than once in the embeddings (first: "
            f"{ordered[int(repeats[0])].as_py()!r}); the groups would be ambiguous"
        )
    return ids


def rows_naming(
    datasets: Iterable[EmbeddingsDataset], field: str
) -> Iterator[tuple[str, pa.Table]]:
    """For every embeddings shard that has ``field``: its path and its rows with the field set
    (columns ``id`` and ``field``). Shards without the column give nothing."""
    for dataset in datasets:
        for path in dataset.shards:
            with FileSystems.open(path) as handle:
                parquet = pq.ParquetFile(handle)
                if field not in parquet.schema_arrow.names:
                    continue
                table = parquet.read(columns=["id", field])
            yield path, table.filter(pc.is_valid(table[field]))


def embed_error_ids(datasets: list[EmbeddingsDataset]) -> set[str]:
    """Ids of the rows the embed jobs rejected (their ``_errors/``), where the id was known.

    Outputs of versions before issue 16 hold them in ``errors/``; both are read.
    """
    found: set[str] = set()
    for dataset in datasets:
        for path in error_parts(dataset):
            with FileSystems.open(path) as handle:
                column = pq.read_table(handle, columns=["id"]).column("id")
            found.update(value for value in column.to_pylist() if value is not None)
    return found


def error_parts(dataset: EmbeddingsDataset) -> list[str]:
    """The dead-letter part files of an embed output: those its manifest lists in the errors
    folder (``_errors/``, or ``errors/`` before issue 16); every part there for a manifest
    without a file list (written before manifests listed their files)."""
    paths: list[str] = []
    for folder in (ERRORS_DIR, *LEGACY_ERRORS_DIRS):
        listed = listed_parts(dataset.directory, dataset.manifest, folder)
        paths += listed if listed is not None else shard_paths(join(dataset.directory, folder))
    return paths
