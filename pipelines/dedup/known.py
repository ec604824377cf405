"""Known duplicates: pairs the corpus names itself, and how many of them dedup found.

It runs no Beam pipeline; the embeddings' files are read through
:mod:`sbert_pipeline.io.filesystems` (Beam's ``FileSystems`` for a remote path).

A corpus may say which rows duplicate which: a field (by default ``duplicate_of``, as in
``examples/sample_corpus.jsonl``) naming, on a duplicate's row, the id of the row it copies.
The embed job keeps such a field next to the vectors (``--keep-fields``), and dedup reads it
from there. Each row with the field set gives one *known duplicate pair* ``(row, duplicate_of)``;
without such a field, the labelled duplicates of ``--labels`` are the known pairs.

A known pair is *found* when both rows end in the same group (a removed row belongs to its
representative's group). *Known-duplicate recall* = found / known pairs. It says how many of
the duplicates one knows of a grouping catches; it cannot say how many non-duplicates it groups
(only labelled non-duplicates can: the precision of ``--labels``).

A row naming an id that was not embedded (rejected, or not in the corpus) or itself gives no
pair; both are counted (``unknown_ids``, ``same_item``), so ``rows naming == pairs +
unknown_ids + same_item + repeated`` (``repeated``: a pair named twice, e.g. from both ends).

Example:
    >>> known = read_known_duplicates(datasets, "duplicate_of", ids)
    >>> known_found(groups.group, known).recall
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sbert_pipeline.dedup.options import KNOWN_FIELD, NO_KNOWN_FIELD
from sbert_pipeline.dedup.sources import rows_naming
from sbert_pipeline.grouping.labels import (
    LabelledPairs,
    PairCounts,
    RawLabels,
    match_labels,
    pair_counts,
)
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.filesystems import FileSystems

# The field read when the embeddings kept it and no other is named, and the value of
# the options give when known duplicates are off (--no-known-duplicates).
DEFAULT_FIELD, NO_FIELD = KNOWN_FIELD, NO_KNOWN_FIELD
logger = logging.getLogger(__name__)

# Missed pairs listed in the report (all of them are in no file: the report lists a sample).
SHOWN_MISSED = 20


@dataclass(frozen=True)
class KnownDuplicates:
    """The known duplicate pairs of a run, as item rows.

    Attributes:
        source: ``"field"`` (a corpus field kept in the embeddings) or ``"labels"``.
        name: the field's name, or the labels file.
        pairs: the pairs, every label True (``a``, ``b`` rows; usable as labelled pairs).
        naming: rows whose field names an id (field), or labelled duplicates read (labels).
        repeated: pairs named more than once (counted once).
    """

    source: str
    name: str
    pairs: LabelledPairs
    naming: int
    repeated: int = 0

    @property
    def count(self) -> int:
        """Known pairs evaluated."""
        return len(self.pairs.a)

    def rows(self, n: int) -> np.ndarray:
        """``(n,)`` bool: the items of some known pair."""
        out = np.zeros(n, bool)
        out[self.pairs.a] = out[self.pairs.b] = True
        return out

    def describe(self) -> str:
        """Where the pairs come from, in words (for the reports)."""
        if self.source == "field":
            return f"the corpus field {self.name} (each row naming the row it duplicates)"
        return f"the labelled duplicates of {self.name}"

    def to_json(self) -> dict:
        """For the manifest."""
        return {
            "source": self.source,
            "field" if self.source == "field" else "file": self.name,
            "naming": self.naming,
            "pairs": self.count,
            "unknown_ids": self.pairs.unknown,
            "same_item": self.pairs.same_item,
            "repeated": self.repeated,
        }


def field_of(datasets: Sequence[EmbeddingsDataset], requested: str | None) -> str | None:
    """The known-duplicates field to read: ``requested``, else :data:`DEFAULT_FIELD` when some
    embeddings kept it, else None; :data:`NO_FIELD` gives None.

    Raises:
        ValueError: ``requested`` is not a column of any of the embeddings.
    """
    if requested == NO_FIELD:
        return None
    name = requested or DEFAULT_FIELD
    if any(name in _columns(dataset) for dataset in datasets):
        return name
    if requested is None:
        return None
    kept = sorted({c for d in datasets for c in _columns(d)} - {"id", "embedding"})
    raise ValueError(
        f"--known-duplicates-field {requested!r}: the embeddings have no such column (they "
        f"hold {', '.join(kept) or 'no kept fields'}); embed with --keep-fields {requested}, "
        "or pass --no-known-duplicates"
    )


def load_known(
    datasets: Sequence[EmbeddingsDataset],
    requested: str | None,
    ids: pa.Array,
    labelled: LabelledPairs | None,
    labels_path: str | None,
) -> KnownDuplicates | None:
    """The known duplicates of a run: from the field (:func:`field_of`) when the embeddings
    hold it and it names some embedded row, else the labelled duplicates, else None; None
    also for ``requested`` :data:`NO_FIELD`.

    Raises:
        ValueError: ``requested`` is not a column of the embeddings, or holds a bad value.
    """
    if requested == NO_FIELD:
        return None
    field = field_of(datasets, requested)
    if field is not None:
        known = read_known_duplicates(datasets, field, ids)
        if known.count:
            return known
        logger.warning(
            "the embeddings' field %r names no other embedded row: no known-duplicate recall "
            "from it",
            field,
        )
    if labelled is not None and labels_path is not None:
        return known_from_labels(labelled, labels_path)
    return None


def _columns(dataset: EmbeddingsDataset) -> set[str]:
    if not dataset.shards:
        return set()
    with FileSystems.open(dataset.shards[0]) as handle:
        return set(pq.read_schema(handle).names)


def read_known_duplicates(
    datasets: Sequence[EmbeddingsDataset], field: str, ids: pa.Array | Sequence[str]
) -> KnownDuplicates:
    """The pairs ``(row, row named by field)`` of the embeddings that hold ``field``.

    A value is an id (a string or a whole number); null and empty values name nothing.

    Raises:
        ValueError: a value is of another kind (named with its shard and id).
    """
    id_a: list[str] = []
    id_b: list[str] = []
    # Only the rows that name something go through Python (a few, usually).
    for path, named in rows_naming(datasets, field):
        items, values = named.column("id"), named.column(field)
        for item, value in zip(items.to_pylist(), values.to_pylist(), strict=True):
            for other in _named(value, path, item, field):
                id_a.append(item)
                id_b.append(other)
    return _known("field", field, id_a, id_b, ids)


def _named(value, path: str, item: str, field: str) -> list[str]:
    """The id ``value`` names (none for null or empty)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(
            f"{path}: row {item!r}, field {field!r}: expected the id of the row it duplicates, "
            f"got {value!r}"
        )
    return [str(value)]


def known_from_labels(labelled: LabelledPairs, path: str) -> KnownDuplicates:
    """The labelled duplicates (label 1) as the known pairs."""
    keep = labelled.label
    pairs = LabelledPairs(
        a=labelled.a[keep],
        b=labelled.b[keep],
        label=labelled.label[keep],
        read=labelled.positives,
        unknown=0,
        same_item=0,
    )
    return KnownDuplicates("labels", path, pairs, naming=labelled.positives)


def _known(
    source: str, name: str, id_a: list[str], id_b: list[str], ids: pa.Array | Sequence[str]
) -> KnownDuplicates:
    matched = match_labels(RawLabels(name, id_a, id_b, np.ones(len(id_a), bool)), ids)
    # One pair per unordered pair of rows (A naming B and B naming A is one pair).
    low, high = np.minimum(matched.a, matched.b), np.maximum(matched.a, matched.b)
    unique = np.unique(np.stack([low, high], axis=1), axis=0) if len(low) else np.zeros((0, 2))
    unique = unique.astype(np.int64)
    pairs = LabelledPairs(
        a=unique[:, 0],
        b=unique[:, 1],
        label=np.ones(len(unique), bool),
        read=matched.read,
        unknown=matched.unknown,
        same_item=matched.same_item,
    )
    return KnownDuplicates(source, name, pairs, len(id_a), repeated=len(low) - len(unique))


@dataclass(frozen=True)
class Found:
    """How many known pairs one grouping put in one group."""

    found: int
    known: int

    @property
    def recall(self) -> float:
        """``found / known``; 0 without known pairs."""
        return self.found / self.known if self.known else 0.0

    @property
    def missed(self) -> int:
        """Known pairs split across groups (or left alone)."""
        return self.known - self.found

    def to_json(self) -> dict:
        """For the manifest."""
        return {"found": self.found, "missed": self.missed, "recall": round(self.recall, 6)}


def partition(group: np.ndarray) -> np.ndarray:
    """``(n,)`` partition labels of a ``group`` array (-1: in no group, so alone)."""
    out = np.asarray(group, dtype=np.int64).copy()
    alone = out < 0
    out[alone] = int(out.max(initial=-1)) + 1 + np.flatnonzero(alone)
    return out


def known_found(group: np.ndarray, known: KnownDuplicates) -> Found:
    """The known pairs found by the groups ``group`` (``(n,)``, -1 for an item in no group)."""
    counts: PairCounts = pair_counts(partition(group), known.pairs)
    return Found(counts.tp, known.count)


def missed_pairs(
    group: np.ndarray, known: KnownDuplicates, limit: int = SHOWN_MISSED
) -> list[tuple[int, int]]:
    """Up to ``limit`` known pairs ``(row, row)`` that ``group`` did not put in one group."""
    labels = partition(group)
    split = np.flatnonzero(labels[known.pairs.a] != labels[known.pairs.b])[:limit]
    return [(int(known.pairs.a[i]), int(known.pairs.b[i])) for i in split]


@dataclass(frozen=True)
class MissedPair:
    """A known duplicate pair that the groups split, as the report shows it."""

    id_a: str
    text_a: str | None
    id_b: str
    text_b: str | None
    score: float | None  # the pair's cosine when it was loaded, else None (under the pairs')


@dataclass(frozen=True)
class KnownView:
    """The known duplicates at the threshold, for the report.

    Attributes:
        known: the known pairs and where they come from.
        found: the chosen method's groups at the threshold on them.
        method: the chosen method.
        precision: the chosen method's pair precision on the labelled pairs (None without
            labels: known duplicates alone cannot measure it).
        missed: some of the pairs the groups split.
        low: the lowest pair score loaded (a missed pair not loaded scores below it).
    """

    known: KnownDuplicates
    found: Found
    method: str
    precision: float | None
    missed: Sequence[MissedPair]
    low: float


def known_view(
    known: KnownDuplicates,
    group: np.ndarray,
    method: str,
    precision: float | None,
    pairs: IndexedPairs,
    ids: Sequence[str],
    texts: dict[str, str],
    low: float,
) -> KnownView:
    """The known duplicates as the report shows them.

    Args:
        known: the known pairs.
        group: ``(n,)`` the written groups (-1: in no group).
        method: the chosen method.
        precision: its pair precision on the labelled pairs at the threshold (None: no labels).
        pairs: the pairs loaded (the missed pairs' scores come from them).
        ids: item ids by row.
        texts: ``{id: text}`` where known.
        low: every pair scoring at least this was loaded.
    """
    missed = missed_pairs(group, known)
    n = len(ids)
    wanted = np.array([a * n + b for a, b in missed], np.int64)
    keys = np.minimum(pairs.a, pairs.b) * n + np.maximum(pairs.a, pairs.b)
    hit = np.flatnonzero(np.isin(keys, wanted))
    scores = {int(keys[i]): float(pairs.scores[i]) for i in hit}
    shown = [
        MissedPair(ids[a], texts.get(ids[a]), ids[b], texts.get(ids[b]), scores.get(a * n + b))
        for a, b in missed
    ]
    return KnownView(known, known_found(group, known), method, precision, shown, low)


def known_fact(view: KnownView) -> str:
    """The one-line fact for the top of the report: ``"150 of 150 pairs (recall 1.000)"``."""
    text = f"{view.found.found} of {view.found.known} pairs (recall {view.found.recall:.3f})"
    if view.precision is not None:
        text += f"; precision on the labelled pairs {view.precision:.3f}"
    return text
