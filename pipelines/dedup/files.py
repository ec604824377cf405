"""Files of the dedup stage: its inputs beside the pairs, and the ``dedup/`` files it writes.

Reading: the ``pairs/`` folder through :class:`pipelines.io.pairs_output.PairsOutput`; the
embeddings the pairs were computed from (:func:`open_embeddings`), their ids and the embed
stage's rejected ids.

Writing: ``groups.parquet`` (:data:`GROUPS_SCHEMA`) and the id lists ``kept_ids.txt`` /
``removed_ids.txt``: UTF-8, one id per line, LF-terminated. Ids may contain anything, so three
characters are escaped: a backslash is written as ``\\\\``, a line feed as ``\\n`` and a carriage
return as ``\\r``; an id without them (the usual case) is written as it is. Read the lists back
with :func:`read_id_list` (split on LF only, then unescape).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.dedup.groups import DuplicateGroups
from pipelines.io.embeddings import EmbeddingsDataset, require_compatible, shard_paths
from pipelines.io.external_vectors import is_embed_output, open_external, recorded_columns
from pipelines.io.filesystems import FileSystems
from pipelines.io.output_dir import join, listed_parts
from pipelines.io.pairs_output import PairsOutput
from pipelines.io.schemas import ERRORS_DIR, LEGACY_ERRORS_DIRS
from pipelines.vectors.cosine_range import clamp_cosines

GROUPS_FILE, KEPT_FILE, REMOVED_FILE = "groups.parquet", "kept_ids.txt", "removed_ids.txt"
ID_LIST_ENCODING = (
    "UTF-8, one id per line, LF-terminated; backslash, LF and CR inside an id are written as "
    "\\\\, \\n and \\r"
)

GROUPS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("group", pa.int64(), nullable=False),
        pa.field("is_representative", pa.bool_(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        # Score of the pair (member, representative); null for the representative itself and
        # for chained members (their pair with it is under the threshold; dedup/terms.py).
        pa.field("score", pa.float32()),
    ]
)


def open_embeddings(pairs: PairsOutput, override: list[str] | None) -> list[EmbeddingsDataset]:
    """The embeddings the pairs were computed from (or ``override``), checked against the pairs.

    Raises:
        FileNotFoundError: a directory is gone (name it with ``--embeddings``).
        ValueError: the pairs manifest names no embeddings and none are given.
        IncompatibleEmbeddingsError: the embeddings differ from those the pairs recorded.
    """
    sources = pairs.embeddings_sources()
    if override:
        directories = list(override)
    elif sources:
        directories = [directory for directory, _ in sources]
    else:
        raise ValueError(
            f"{pairs.directory}: its manifest names no embeddings; pass --embeddings DIR"
        )
    # Vectors not made by `sbert embed` are reopened with the columns the pairs recorded.
    columns = next(filter(None, (recorded_columns(m) for _, m in sources if m)), None)
    datasets = []
    for directory in directories:
        try:
            if columns is not None and not is_embed_output(directory):
                datasets.append(open_external(directory, columns))
            else:
                datasets.append(EmbeddingsDataset.open(directory))
        except FileNotFoundError as err:
            raise FileNotFoundError(
                f"{err} (the embeddings of the pairs in {pairs.directory}; if they moved, "
                "pass --embeddings DIR)"
            ) from err
    recorded = [manifest for _, manifest in sources if manifest]
    for dataset in datasets:
        for manifest in recorded[:1]:
            require_compatible(
                manifest, dataset.manifest, f"the pairs' embeddings and {dataset.directory}"
            )
    for other in datasets[1:]:
        require_compatible(
            datasets[0].manifest, other.manifest, f"{datasets[0].directory} and {other.directory}"
        )
    return datasets


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
    if pc.count_distinct(ids).as_py() != len(ids):
        counts = pc.value_counts(ids)
        repeated = counts.filter(pc.greater(counts.field("counts"), 1))
        raise ValueError(
            f"{len(repeated)} ids occur more than once in the embeddings (first: "
            f"{repeated[0]['values'].as_py()!r}); the groups would be ambiguous"
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


def groups_table(
    ids: pa.Array, groups: DuplicateGroups, rank: np.ndarray, scores: np.ndarray
) -> pa.Table:
    """``groups.parquet``: one row per grouped item, by group, representative first, then rank.

    Args:
        ids: every item's id.
        groups: the groups.
        rank: the order rank.
        scores: ``(n,)`` each member's score with its representative (NaN: unknown / itself).
    """
    rows = np.flatnonzero(groups.group >= 0)
    rows = rows[np.lexsort((rank[rows], ~groups.representative[rows], groups.group[rows]))]
    member_scores = clamp_cosines(scores[rows])
    return pa.Table.from_arrays(
        [
            ids.take(pa.array(rows, pa.int64())),
            pa.array(groups.group[rows], pa.int64()),
            pa.array(groups.representative[rows], pa.bool_()),
            pa.array(groups.sizes[groups.group[rows]], pa.int64()),
            pa.array(member_scores, pa.float32(), mask=np.isnan(member_scores)),
        ],
        schema=GROUPS_SCHEMA,
    )


def encode_id(value: str) -> str:
    """An id as one line of an id list (without the line feed)."""
    if "\\" not in value and "\n" not in value and "\r" not in value:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


_ESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)


def decode_id(line: str) -> str:
    """The id written as ``line`` by :func:`encode_id`.

    Raises:
        ValueError: an escape other than ``\\\\``, ``\\n`` or ``\\r``.
    """

    def replace(match: re.Match) -> str:
        if match.group(1) not in _ESCAPES:
            raise ValueError(f"bad escape {match.group(0)!r} in id list line {line!r}")
        return _ESCAPES[match.group(1)]

    return _ESCAPE.sub(replace, line) if "\\" in line else line


def write_id_list(path: str, ids: Iterable[str]) -> int:
    """Write ids one per line (see the module docstring); returns how many."""
    count = 0
    chunk: list[str] = []
    with FileSystems.create(path, mime_type="text/plain") as handle:
        for value in ids:
            chunk.append(encode_id(value))
            count += 1
            if len(chunk) >= 65536:
                handle.write(("\n".join(chunk) + "\n").encode("utf-8"))
                chunk = []
        if chunk:
            handle.write(("\n".join(chunk) + "\n").encode("utf-8"))
    return count


def read_id_list(path: str) -> list[str]:
    """Ids from a list written by :func:`write_id_list`."""
    with FileSystems.open(path) as handle:
        text = handle.read().decode("utf-8")
    return [decode_id(line) for line in text.split("\n")[:-1]] if text else []
