"""The pairs a dedup run needs, read from an ``sbert pairs`` output (Beam-free).

``pairs/`` holds every pair down to the pairs stage's threshold (the *floor*); below it, pairs
come from the top-k neighbour lists (``neighbors/``), which miss the pairs of an item with more
than k near neighbours. :func:`load_pairs` reads down to the lowest score any threshold of the
sweep (or a star/split radius) needs, and says which thresholds can be answered exactly.

The same module holds the other sources the inputs phase reads: the embeddings beside the
pairs (:func:`open_embeddings`, their ids, the rows naming a field, the ids the embed stage
rejected), the memory a run needs from its input manifests, checked against the budget before
any pair is read (:func:`check_dedup_memory`: the pairs as columns, the ids as one Arrow array
and a few ``(n,)`` arrays per row, on top of what the process already holds), and the
labelled-pairs file (:func:`load_labels`: TSV, CSV, JSONL or Parquet, two ids and a 0/1 label).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.dedup.option_names import named_as_keywords, option_name
from sbert_pipeline.dedup.options import LABEL_FIELD, LABEL_ID_A, LABEL_ID_B
from sbert_pipeline.dedup.versions import GROUPS_FILE
from sbert_pipeline.grouping.labels import LabelledPairs, RawLabels, match_labels
from sbert_pipeline.grouping.pairs import IndexedPairs, index_pairs
from sbert_pipeline.io.embeddings import EmbeddingsDataset, count_rows, shard_paths
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import MANIFEST, join, listed_parts
from sbert_pipeline.io.pairs_output import PairColumns, PairsOutput
from sbert_pipeline.io.resources import MemoryBudget, require_memory, resident_bytes
from sbert_pipeline.io.schemas import ERRORS_DIR, LEGACY_ERRORS_DIRS
from sbert_pipeline.io.sizes import format_size

from sbert_core.errors import DataFileError
from sbert_core.tabular import read_table


@dataclass(frozen=True)
class PairSource:
    """The pairs loaded for the threshold and the sweep, and what they can answer."""

    pairs: IndexedPairs
    low: float  # every pair with score >= low is loaded (but see limited_below)
    thresholds: list[float]  # the sweep thresholds that can be answered, ascending
    limited_below: float | None  # thresholds under this come from top-k lists (may miss pairs)
    origin: str  # "pairs" or "pairs+neighbors"
    notes: list[str]

    def limited(self, threshold: float) -> bool:
        """Whether pairs at ``threshold`` may be missing (top-k lists only)."""
        if self.limited_below is None:
            return False
        return bool(np.float32(threshold) < np.float32(self.limited_below))


def load_pairs(
    pairs_output: PairsOutput,
    ids: pa.Array,
    threshold: float,
    thresholds: list[float],
    reach: float | None = None,
) -> PairSource:
    """Read the pairs the threshold and the sweep need, from ``pairs/`` or, below the pairs'
    threshold, also from ``neighbors/``.

    Args:
        pairs_output: the pairs directory.
        ids: every embedded id (row ``i`` is item ``i``).
        threshold: the chosen threshold (one of ``thresholds``).
        thresholds: the sweep thresholds, ascending.
        reach: the lowest score some method needs besides the thresholds (a star or split
            radius); it must not be below the pairs' floor (the caller checks).

    Raises:
        ValueError: the threshold is below what ``pairs/`` holds and there are no neighbour
            lists to fall back on.
    """
    floor = pairs_output.threshold
    notes: list[str] = []
    if pairs_output.manifest.get("method") == "clustered":
        recall = pairs_output.manifest.get("recall_at_k")
        notes.append(
            f"the pairs were found by cluster-blocked search (recall@k {recall} against exact "
            "search on a sample): a pair whose items share no block is missing"
        )
    if floor is not None and np.float32(threshold) >= np.float32(floor):
        answerable = [t for t in thresholds if np.float32(t) >= np.float32(floor)]
        if len(answerable) < len(thresholds):
            notes.append(
                f"the sweep starts at {answerable[0]:g}: {pairs_output.directory} holds the "
                f"pairs with score >= {floor:g} only"
            )
        low = answerable[0] if reach is None else min(answerable[0], max(reach, floor))
        pairs = _indexed(ids, pairs_output.read_pairs(low))
        return PairSource(pairs, low, answerable, None, "pairs", notes)

    if not pairs_output.neighbor_files:
        what = (
            f"the pairs in {pairs_output.directory} hold only scores >= {floor:g}"
            if floor is not None
            else f"{pairs_output.directory} was written without a pairs threshold"
        )
        raise ValueError(
            f"--threshold {threshold:g} cannot be answered: {what}, and it has no neighbour "
            f"lists; rerun sbert pairs with --threshold {threshold:g} or lower, or raise "
            "--threshold"
        )
    low = thresholds[0]
    columns = PairColumns.concat(
        [pairs_output.read_pairs(low), pairs_output.read_neighbor_pairs(low)]
    )
    k = pairs_output.k
    below = f"below {floor:g}" if floor is not None else "at every threshold"
    notes.append(
        f"pairs {below} come from the top-{k if k is not None else 'k'} neighbour lists of "
        f"{pairs_output.directory}: an item with more near neighbours than that may miss some "
        "of its pairs, so groups can be split and the removed counts are lower bounds; rerun "
        f"sbert pairs with --threshold {threshold:g} for exact groups"
    )
    # Without a pairs threshold nothing in pairs/ is known to be complete: every threshold is
    # limited (2 is above any cosine).
    limited_below = floor if floor is not None else 2.0
    return PairSource(
        _indexed(ids, columns), low, thresholds, limited_below, "pairs+neighbors", notes
    )


def no_pairs(thresholds: list[float]) -> PairSource:
    """The pairs of a run without ``--pairs`` (``--against`` only): none, at every threshold."""
    against = option_name("against")
    if named_as_keywords():  # deduplicate(data, against=...), which has no pairs to give
        note = (
            f"with {against} the data is not deduplicated within itself; only its rows that "
            f"duplicate a row of {against} are removed"
        )
    else:
        note = (
            f"no {option_name('pairs')}: the corpus is not deduplicated within itself; only "
            f"the rows that duplicate a {against} reference row are removed"
        )
    return PairSource(IndexedPairs.empty(), thresholds[0], thresholds, None, "none", [note])


def _indexed(ids: pa.Array, columns: PairColumns) -> IndexedPairs:
    return index_pairs(ids, columns.id_a, columns.id_b, columns.scores)


def check_count(pairs_output: PairsOutput, n: int) -> None:
    """Refuse embeddings whose row count differs from the one the pairs were computed over.

    Raises:
        ValueError: the counts differ (the embeddings changed since the pairs stage).
    """
    manifest = pairs_output.manifest
    recorded = manifest.get("n", (manifest.get("counts") or {}).get("items"))
    if recorded is not None and int(recorded) != n:
        raise ValueError(
            f"the embeddings hold {n} rows but the pairs in {pairs_output.directory} were "
            f"computed over {recorded}; the embeddings changed since, rerun sbert pairs"
        )


# Bytes per pair at the peak: the Arrow ids and scores read and mapped to rows, the row pairs,
# their sort order, and a threshold's subset with the sweep's adjacency.
BYTES_PER_PAIR = 160
# Bytes per row: the ids read (and their sort for the repeat check), Arrow's id -> row hash
# table while the pairs are mapped, about ten (n,) int64 arrays of the groupings and rankings.
BYTES_PER_ROW = 200
# The least the process holds with the interpreter, numpy, pyarrow and scipy loaded (measured:
# 423 MiB); a standalone ``sbert dedup`` has loaded only part of it when the check runs.
BASE_BYTES = 450 * 2**20
# Bytes per grouped row of a previous version in the output folder (``--stable-keep``): the
# members of its groups and of this run's as Python sets, to match stable group ids and count
# what changed (5M rows, 1.85M grouped: +0.69 GB, 373 bytes each), and its id lists.
BYTES_PER_PREVIOUS_GROUPED_ROW = 500


def dedup_memory(rows: int, pairs: int, held: int = 0, previous_grouped: int = 0) -> int:
    """Bytes a dedup run over ``rows`` items and ``pairs`` loaded pairs needs at its peak, in
    a process that holds ``held`` bytes when it starts (at least :data:`BASE_BYTES` count),
    with a previous version of ``previous_grouped`` grouped rows to compare with."""
    return (
        max(held, BASE_BYTES)
        + rows * BYTES_PER_ROW
        + pairs * BYTES_PER_PAIR
        + previous_grouped * BYTES_PER_PREVIOUS_GROUPED_ROW
    )


def previous_grouped_rows(output: str | None) -> int:
    """Grouped rows of the dedup version ``output`` holds (``groups.parquet``'s footer; 0
    when there is none or it cannot be read: then it is not compared either)."""
    if output is None:
        return 0
    path = join(output, GROUPS_FILE)
    try:
        return count_rows([path]) if FileSystems.exists(join(output, MANIFEST)) else 0
    except (OSError, pa.ArrowException):
        return 0


def pairs_to_load(pairs_output: PairsOutput, threshold: float) -> int:
    """How many pairs the run reads, from the manifest (the Parquet footers when it has no
    count): ``pairs/``, and the neighbour lists' entries when ``threshold`` lies below the
    pairs' threshold (they are read too, :func:`load_pairs`)."""
    manifest = pairs_output.manifest
    count = (manifest.get("counts") or {}).get("pairs")
    if count is None:
        count = (manifest.get("pairs") or {}).get("count")
    total = int(count) if count is not None else count_rows(pairs_output.pair_files)
    floor = pairs_output.threshold
    if (floor is None or threshold < floor) and pairs_output.neighbor_files:
        total += count_rows(pairs_output.neighbor_files) * (pairs_output.k or 1)
    return total


def check_dedup_memory(
    budget: MemoryBudget,
    pairs_output: PairsOutput | None,
    datasets: list[EmbeddingsDataset],
    threshold: float,
    output: str | None = None,
) -> dict:
    """Refuse a run that would need more than ``budget``; else what it was estimated at.

    Rows come from the embeddings' Parquet footers, pairs from the pairs manifest: nothing
    else is read.

    Returns:
        ``{"budget", "rows", "pairs", "held_at_start_bytes", "previous_grouped_rows",
        "estimate_bytes"}`` for the manifest.

    Raises:
        sbert_pipeline.io.resources.ResourceError: over the budget (naming the size needed).
    """
    rows = sum(dataset.count for dataset in datasets)
    pairs = 0 if pairs_output is None else pairs_to_load(pairs_output, threshold)
    held = resident_bytes()
    previous = previous_grouped_rows(output)
    needed = dedup_memory(rows, pairs, held, previous)
    compared = (
        f", {BYTES_PER_PREVIOUS_GROUPED_ROW} a grouped row of the previous version ({previous:,})"
        if previous
        else ""
    )
    require_memory(
        needed,
        budget,
        f"dedup of {rows:,} rows and {pairs:,} pairs (about {BYTES_PER_ROW} bytes a row, "
        f"{BYTES_PER_PAIR} a pair{compared}, on top of the {format_size(max(held, BASE_BYTES))} "
        "the process holds with its libraries)",
        "raise --threshold / the pairs stage's threshold so that fewer pairs are loaded",
    )
    return {
        "budget": budget.to_json(),
        "rows": rows,
        "pairs": pairs,
        "held_at_start_bytes": held,
        "previous_grouped_rows": previous,
        "estimate_bytes": needed,
    }


_TRUE = {"1", "true", "yes"}


_FALSE = {"0", "false", "no"}


@dataclass(frozen=True)
class LabelColumns:
    """Which columns of a labelled-pairs file hold the two ids and the 0/1 label."""

    id_a: str = LABEL_ID_A
    id_b: str = LABEL_ID_B
    label: str = LABEL_FIELD


def read_labelled_pairs(
    path: str | Path, columns: LabelColumns = LabelColumns(), fmt: str | None = None
) -> RawLabels:
    """Read labelled pairs from TSV (quoting off), CSV, JSONL or Parquet, optionally ``.gz``.

    Ids are compared as strings (``23`` and ``"23"`` are the same id). A label is ``0``/``1``,
    ``true``/``false`` or ``yes``/``no`` (any case), or a JSON/Parquet bool or 0/1 number.

    Raises:
        DataFileError: unreadable file, a missing column, an empty id or a label that is not
            0/1 (naming the file, row and column).
    """
    table = read_table(path, fmt)
    table.require([columns.id_a, columns.id_b, columns.label])
    ids = []
    for name in (columns.id_a, columns.id_b):
        values = []
        for number, value in enumerate(table.column(name), start=1):
            text = _id_text(value)
            if text is None:
                raise DataFileError(
                    f"{table.path}: row {number}, column {name!r}: expected an id, got {value!r}"
                )
            values.append(text)
        ids.append(values)
    labels = np.empty(len(table.rows), bool)
    for number, value in enumerate(table.column(columns.label), start=1):
        flag = _label(value)
        if flag is None:
            raise DataFileError(
                f"{table.path}: row {number}, column {columns.label!r}: expected a 0/1 label, "
                f"got {value!r}"
            )
        labels[number - 1] = flag
    return RawLabels(table.path, ids[0], ids[1], labels)


def _id_text(value) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else None
    text = str(value)
    return text if text.strip() else None


def _label(value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    return None


def load_labels(
    path: str,
    columns: LabelColumns,
    ids: pa.Array,
    *,
    fmt: str | None = None,
    skip_unknown: bool = False,
) -> LabelledPairs:
    """Labelled pairs of a file mapped to the items, checked for use in a dedup run.

    Raises:
        DataFileError: unreadable file, missing column, bad id or label
            (:func:`read_labelled_pairs`).
        ValueError: a pair names an id that is not among the items (unless ``skip_unknown``:
            then such pairs are counted and left out), or no usable pair is a duplicate.
    """
    raw = read_labelled_pairs(path, columns, fmt)
    labelled = match_labels(raw, ids)
    if labelled.unknown and not skip_unknown:
        known = set(ids.to_pylist())
        first = next(
            (number, item)
            for number, pair in enumerate(zip(raw.id_a, raw.id_b, strict=True), start=1)
            for item in pair
            if item not in known
        )
        raise ValueError(
            f"{raw.path}: {labelled.unknown} of {labelled.read} labelled pairs name ids that "
            f"are not among the {len(ids)} embedded ids (first: {first[1]!r} in row "
            f"{first[0]}); check --label-id-a/--label-id-b, or pass --skip-unknown-labels to "
            "leave those pairs out"
        )
    if not labelled.positives:
        raise ValueError(
            f"{raw.path}: none of the {len(labelled.a)} usable labelled pairs is a duplicate "
            f"(label column {columns.label!r}); recall and F1 are undefined"
        )
    return labelled


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
