"""Files of the dedup stage: the ``pairs/`` output it reads and the ``dedup/`` files it writes.

Reading (DESIGN.md ``pairs/``): ``PAIRS_DIR/_manifest.json`` (``method``, ``k``, ``threshold``:
the score down to which ``pairs/`` is complete, or null, ``n``, and the embeddings it was
computed from under ``embeddings``), ``PAIRS_DIR/pairs/*.parquet`` (``id_a``, ``id_b``,
``score``) and ``PAIRS_DIR/neighbors/*.parquet`` (``id``, ``neighbor_ids``, ``scores``).

Writing: ``groups.parquet`` (:data:`GROUPS_SCHEMA`) and the id lists ``kept_ids.txt`` /
``removed_ids.txt``: UTF-8, one id per line, LF-terminated. Ids may contain anything, so three
characters are escaped: a backslash is written as ``\\\\``, a line feed as ``\\n`` and a carriage
return as ``\\r``; an id without them (the usual case) is written as it is. Read the lists back
with :func:`read_id_list` (split on LF only, then unescape).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines.dedup.groups import DuplicateGroups
from pipelines.io.embeddings import EmbeddingsDataset, require_compatible
from pipelines.io.output_dir import join, read_manifest
from pipelines.vectors.checks import check_cosine
from pipelines.vectors.cosine_range import clamp_cosines

PAIRS_SUBDIR, NEIGHBORS_SUBDIR = "pairs", "neighbors"
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
        # for members whose pair with it is under the threshold (they joined through others).
        pa.field("score", pa.float32()),
    ]
)


@dataclass(frozen=True)
class PairColumns:
    """Pairs as read: string ids of both ends and float32 scores."""

    id_a: pa.Array
    id_b: pa.Array
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    @staticmethod
    def concat(parts: list[PairColumns]) -> PairColumns:
        """One set from several."""
        if not parts:
            empty = pa.array([], pa.string())
            return PairColumns(empty, empty, np.zeros(0, np.float32))
        return PairColumns(
            pa.concat_arrays([part.id_a for part in parts]),
            pa.concat_arrays([part.id_b for part in parts]),
            np.concatenate([part.scores for part in parts]),
        )


@dataclass(frozen=True)
class PairsOutput:
    """A complete ``sbert pairs`` output directory."""

    directory: str
    manifest: dict

    @classmethod
    def open(cls, directory: str) -> PairsOutput:
        """Open a pairs output; refuses one without a manifest or with a nonsensical threshold.

        Raises:
            FileNotFoundError: no manifest (missing directory or unfinished job).
            ValueError: the manifest belongs to another stage or its threshold is not a cosine.
        """
        manifest = read_manifest(directory)
        kind = manifest.get("kind", "pairs")
        if kind != "pairs":
            raise ValueError(f"{directory} holds {kind!r}, not the output of sbert pairs")
        threshold = manifest.get("threshold")
        if threshold is not None:
            check_cosine(threshold, f"{directory}: the manifest's threshold")
        return cls(directory, manifest)

    @property
    def threshold(self) -> float | None:
        """Score down to which ``pairs/`` holds every pair (None: not written for a threshold)."""
        value = self.manifest.get("threshold")
        return None if value is None else float(value)

    @property
    def k(self) -> int | None:
        """Neighbours per item in ``neighbors/``."""
        value = self.manifest.get("k")
        return None if value is None else int(value)

    @property
    def pair_files(self) -> list[str]:
        """Parquet files of ``pairs/``, sorted."""
        return _parquet_files(join(self.directory, PAIRS_SUBDIR))

    @property
    def neighbor_files(self) -> list[str]:
        """Parquet files of ``neighbors/``, sorted."""
        return _parquet_files(join(self.directory, NEIGHBORS_SUBDIR))

    def embeddings_sources(self) -> list[tuple[str, dict | None]]:
        """``(directory, manifest recorded then or None)`` of every embeddings input.

        The manifest may name them as ``{"directory", "manifest"}``, a list of those, or plain
        directory strings (also under ``embeddings_dirs`` or ``inputs``).
        """
        recorded = self.manifest.get("embeddings")
        if recorded is None:
            recorded = self.manifest.get("embeddings_dirs", self.manifest.get("inputs"))
        if recorded is None:
            return []
        entries = recorded if isinstance(recorded, list) else [recorded]
        sources = []
        for entry in entries:
            if isinstance(entry, str):
                sources.append((entry, None))
            elif isinstance(entry, dict) and isinstance(entry.get("directory"), str):
                sources.append((entry["directory"], entry.get("manifest")))
            else:
                raise ValueError(
                    f"{self.directory}: cannot read the embeddings entry {entry!r} of its manifest"
                )
        return sources

    def read_pairs(self, min_score: float) -> PairColumns:
        """The pairs of ``pairs/`` with ``score >= min_score`` (float32 comparison)."""
        parts = []
        limit = np.float32(min_score)
        for path in self.pair_files:
            for batch in _batches(path, ("id_a", "id_b", "score")):
                scores = _float32(batch.column("score"), path)
                keep = scores >= limit
                mask = pa.array(keep)
                parts.append(
                    PairColumns(
                        batch.column("id_a").filter(mask),
                        batch.column("id_b").filter(mask),
                        scores[keep],
                    )
                )
        return PairColumns.concat(parts)

    def read_neighbor_pairs(self, min_score: float) -> PairColumns:
        """Pairs ``(id, neighbour)`` from ``neighbors/`` with ``score >= min_score``, as listed
        (most pairs appear twice, once from each end)."""
        parts = []
        limit = np.float32(min_score)
        for path in self.neighbor_files:
            for batch in _batches(path, ("id", "neighbor_ids", "scores")):
                neighbors, scores = batch.column("neighbor_ids"), batch.column("scores")
                if not pc.all(
                    pc.equal(pc.list_value_length(neighbors), pc.list_value_length(scores))
                ).as_py():
                    raise ValueError(f"{path}: neighbor_ids and scores differ in length in a row")
                flat_scores = _float32(pc.list_flatten(scores), path)
                keep = flat_scores >= limit
                mask = pa.array(keep)
                owners = batch.column("id").take(pc.list_parent_indices(neighbors))
                parts.append(
                    PairColumns(
                        owners.filter(mask),
                        pc.list_flatten(neighbors).filter(mask),
                        flat_scores[keep],
                    )
                )
        return PairColumns.concat(parts)


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
    datasets = []
    for directory in directories:
        try:
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


def embed_error_ids(datasets: list[EmbeddingsDataset]) -> set[str]:
    """Ids of the rows the embed jobs rejected (their ``errors/``), where the id was known."""
    found: set[str] = set()
    for dataset in datasets:
        for path in _parquet_files(join(dataset.directory, "errors")):
            with FileSystems.open(path) as handle:
                column = pq.read_table(handle, columns=["id"]).column("id")
            found.update(value for value in column.to_pylist() if value is not None)
    return found


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


def write_table(path: str, table: pa.Table) -> None:
    """Write one Parquet file on any Beam filesystem."""
    with FileSystems.create(path) as handle:
        pq.write_table(table, handle)


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


def _parquet_files(directory: str) -> list[str]:
    if not FileSystems.exists(directory):
        return []
    pattern = join(directory, "*.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def _batches(path: str, columns: tuple[str, ...]):
    with FileSystems.open(path) as handle:
        parquet = pq.ParquetFile(handle)
        missing = [name for name in columns if name not in parquet.schema_arrow.names]
        if missing:
            raise ValueError(
                f"{path} lacks the column(s) {', '.join(missing)} (has: "
                f"{', '.join(parquet.schema_arrow.names)})"
            )
        yield from parquet.iter_batches(columns=list(columns), batch_size=1 << 20)


def _float32(column: pa.Array, path: str) -> np.ndarray:
    if column.null_count:
        raise ValueError(f"{path}: {column.null_count} null scores")
    return column.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
