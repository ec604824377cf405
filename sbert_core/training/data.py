"""Training and evaluation examples from TSV/CSV/JSONL/Parquet files (gzip allowed).

A :class:`DataSpec` names a file, the kind of examples it holds and, where the file's column
names differ from the roles below, which column plays which role:

=================  ===================================  ==========================================
kind               roles                                used by
=================  ===================================  ==========================================
``scored_pairs``   sentence1, sentence2, score          regression (cosine loss), STS evaluation
``labelled_pairs`` sentence1, sentence2, label          classification (softmax loss), accuracy
``triplets``       anchor, positive, negative           triplet loss, in-batch negatives
``pairs``          anchor, positive                     in-batch negatives
``nli_triplets``   sentence1, sentence2, label          NLI pairs turned into (premise, entailment,
                                                        contradiction) triplets
``duplicate_pairs`` id1, id2, sentence1, sentence2,     labelled duplicates (QQP) turned into
                   label (0/1)                          (question, duplicate) pairs with group ids,
                                                        from one part of a component-wise split
=================  ===================================  ==========================================

``duplicate_pairs`` (:mod:`sbert_core.training.duplicate_pairs`): ``part`` picks the ``train`` or
``holdout`` part of a split by connected components of the labelled-pair graph (``all``: no
split); the examples are that part's duplicate pairs, each with the id of its duplicate group
(``ExampleSet.groups``), so the in-batch-negatives sampler never batches two members of a group.

Everything is checked before training starts. A missing column, an empty text, a score outside
the declared range, an unknown label or a file without examples raises ``DataFileError`` naming
the file, the row (1-based, header excluded) and the column.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from sbert_core.errors import DataFileError
from sbert_core.tabular import Table, float_column, read_table, text_column
from sbert_core.training.cosine_band import CosineBand
from sbert_core.training.duplicate_pairs import (
    DuplicatePairs,
    DuplicateSplit,
    duplicate_flags,
    id_values,
    split_duplicate_pairs,
)
from sbert_core.training.hard_negatives import HardNegativeConfig, triplet_texts

logger = logging.getLogger(__name__)

ExampleKind = Literal["scored_pairs", "labelled_pairs", "triplets", "pairs"]
DataKind = Literal[
    "scored_pairs", "labelled_pairs", "triplets", "pairs", "nli_triplets", "duplicate_pairs"
]
SplitPart = Literal["all", "train", "holdout"]
DATA_KINDS: tuple[str, ...] = get_args(DataKind)
NLI_LABELS: tuple[str, ...] = ("entailment", "neutral", "contradiction")

ROLES: dict[str, tuple[str, ...]] = {
    "scored_pairs": ("sentence1", "sentence2", "score"),
    "labelled_pairs": ("sentence1", "sentence2", "label"),
    "triplets": ("anchor", "positive", "negative"),
    "pairs": ("anchor", "positive"),
    "nli_triplets": ("sentence1", "sentence2", "label"),
    "duplicate_pairs": ("id1", "id2", "sentence1", "sentence2", "label"),
}
_TARGET_ROLES = ("score", "label")


@dataclass
class DataSpec:
    """Where examples come from and how to read them.

    Example (YAML)::

        path: ../shared/data/snli/dev.tsv.gz
        kind: labelled_pairs
        columns: {sentence1: premise, sentence2: hypothesis}   # only where names differ
    """

    path: str = ""
    kind: DataKind = "scored_pairs"
    # role -> column name in the file, for roles whose column is not named like the role.
    columns: dict[str, str] = field(default_factory=dict)
    # tsv, csv, jsonl or parquet; None: from the extension.
    format: str | None = None
    # scored_pairs: the declared range of the gold scores (STSb: 0-5); scaled to [0, 1].
    score_range: tuple[float, float] = (0.0, 5.0)
    # labelled_pairs / nli_triplets: the label vocabulary, in class-index order.
    labels: tuple[str, ...] = NLI_LABELS
    # Read only the first N rows (quick runs); None reads all.
    limit: int | None = None
    # duplicate_pairs: which part of the component-wise split (all: no split), the holdout's
    # expected share of components, and the seed choosing them (train and holdout specs of one
    # run must agree on both).
    part: SplitPart = "all"
    holdout_fraction: float = 0.5
    split_seed: int = 0
    # duplicate_pairs: keep at most this many duplicate pairs of one group (chosen with
    # split_seed; the count left out is logged). A group's pairs need one batch each, so a group
    # larger than the epoch's batch count makes every batch smaller; None keeps all.
    max_pairs_per_group: int | None = None
    # duplicate_pairs: one hard negative per pair, (anchor, positive, negative) triplets
    # (sbert_core.training.hard_negatives: mode none, labelled, mined or labelled+mined).
    hard_negatives: HardNegativeConfig = field(default_factory=HardNegativeConfig)
    # Cross-encoder pairs: keep only those whose cosine by a bi-encoder lies in this band, the
    # pairs verify will score (sbert_core.training.cosine_band); None keeps every pair.
    cosine_band: CosineBand | None = None

    def column(self, role: str) -> str:
        """The file column that holds ``role``."""
        return self.columns.get(role, role)

    @property
    def example_kind(self) -> ExampleKind:
        """The kind of examples this file yields (NLI triplets are built into ``triplets``)."""
        if self.kind == "duplicate_pairs" and self.hard_negatives.enabled:
            return "triplets"
        return {"nli_triplets": "triplets", "duplicate_pairs": "pairs"}.get(self.kind, self.kind)


@dataclass(frozen=True)
class ExampleSet:
    """Examples stored by column: ``texts[c][i]`` is column ``c`` of example ``i``.

    Attributes:
        kind: what the columns mean (see the module docstring).
        texts: one tuple of strings per text column (2 for pairs, 3 for triplets).
        targets: ``(N,)`` float32 scores scaled to [0, 1], int64 label indices, or None.
        label_names: class names by index, for labelled pairs.
        source: where the examples were read from, for messages and manifests.
        groups: ``(N,)`` int64 group ids (equal: duplicates, never in one in-batch-negatives
            batch), or None.
    """

    kind: ExampleKind
    texts: tuple[tuple[str, ...], ...]
    targets: np.ndarray | None = None
    label_names: tuple[str, ...] = ()
    source: str = ""
    groups: np.ndarray | None = None

    def __post_init__(self) -> None:
        lengths = {len(column) for column in self.texts}
        if self.targets is not None:
            lengths.add(len(self.targets))
        if self.groups is not None:
            lengths.add(len(self.groups))
        if len(lengths) > 1:
            raise ValueError(f"{self.source}: columns of different lengths {sorted(lengths)}")

    def __len__(self) -> int:
        return len(self.texts[0]) if self.texts else 0

    def select(self, indices: Sequence[int] | np.ndarray) -> ExampleSet:
        """The examples at ``indices``, in that order."""
        indices = np.asarray(indices, dtype=np.int64)
        return ExampleSet(
            kind=self.kind,
            texts=tuple(tuple(column[i] for i in indices) for column in self.texts),
            targets=None if self.targets is None else self.targets[indices],
            label_names=self.label_names,
            source=self.source,
            groups=None if self.groups is None else self.groups[indices],
        )

    def fingerprint(self) -> str:
        """sha256 of the examples' content: a resumed run checks it trains on the same data."""
        digest = hashlib.sha256(self.kind.encode())
        for column in self.texts:
            digest.update(json.dumps(column, ensure_ascii=False).encode())
        if self.targets is not None:
            digest.update(np.ascontiguousarray(self.targets).tobytes())
        if self.groups is not None:  # other groups give other batches
            digest.update(np.ascontiguousarray(self.groups, dtype=np.int64).tobytes())
        return digest.hexdigest()


def single_target(examples: ExampleSet) -> str | None:
    """The one target every example has, as users read it (``label 'entailment'``, ``target 1``
    on the [0, 1] scale the loaders give), or None: targets differ, or there are none.

    A training set of one class gives an objective nothing to tell apart.
    """
    targets = examples.targets
    if targets is None or not len(targets) or not np.all(targets == targets[0]):
        return None
    if examples.label_names:
        return f"label {examples.label_names[int(targets[0])]!r}"
    return f"target {float(targets[0]):g}"


def load_examples(spec: DataSpec, text_key: Callable[[str], str] | None = None) -> ExampleSet:
    """Read and validate the examples ``spec`` describes.

    Args:
        spec: the file and its kind.
        text_key: ``duplicate_pairs``: texts with one key are copies of one text (one group);
            default the exact text.

    Raises:
        DataFileError: missing or unreadable file, missing column, empty text, a score that is
            not a number or lies outside ``score_range``, an unknown label, no examples; the
            message names the file, row and column.
        ValueError: an invalid spec (unknown kind or role, empty score range, ...).
    """
    if spec.kind == "duplicate_pairs":
        split = load_duplicate_split(spec, text_key)
        rows = np.flatnonzero(split.rows_in(spec.part) & split.label)
        if not rows.size:
            raise DataFileError(f"{spec.path}: no duplicate pairs in the {spec.part} part")
        rows = _capped(rows, split.group[split.row1[rows]], spec)
        q1, q2 = split.row1[rows], split.row2[rows]
        if spec.hard_negatives.enabled:
            if spec.part != "train":
                raise ValueError(f"{spec.path}: hard_negatives need part train, not {spec.part}")
            texts, groups = triplet_texts(
                split, q1, q2, spec.hard_negatives, spec.split_seed, spec.path
            )
            return ExampleSet("triplets", texts, source=spec.path, groups=groups)
        texts = (tuple(split.texts[q] for q in q1), tuple(split.texts[q] for q in q2))
        return ExampleSet("pairs", texts, source=spec.path, groups=split.group[q1])
    table = _read_spec(spec)
    roles = ROLES[spec.kind]
    texts = tuple(
        tuple(text_column(table, spec.column(role))) for role in roles if role not in _TARGET_ROLES
    )
    if spec.kind == "scored_pairs":
        scores = _scores_in_range(table, spec.column("score"), spec.score_range)
        return ExampleSet(spec.kind, texts, scores, source=table.path)
    if spec.kind in ("labelled_pairs", "nli_triplets"):
        labels = _label_indices(table, spec.column("label"), spec.labels)
        if spec.kind == "nli_triplets":
            return nli_triplets(*texts, labels, spec.labels, source=table.path)
        return ExampleSet(
            spec.kind, texts, labels, label_names=tuple(spec.labels), source=table.path
        )
    return ExampleSet(spec.kind, texts, source=table.path)


def load_duplicate_split(
    spec: DataSpec, text_key: Callable[[str], str] | None = None
) -> DuplicateSplit:
    """The labelled pairs of a ``duplicate_pairs`` spec with their component-wise split.

    Raises:
        DataFileError / ValueError: as :func:`load_examples`, and an id with two texts.
    """
    if spec.kind != "duplicate_pairs":
        raise ValueError(f"{spec.path}: a split needs kind duplicate_pairs, not {spec.kind}")
    table = _read_spec(spec)
    path = table.path
    pairs = DuplicatePairs(
        id1=id_values(table.column(spec.column("id1")), path, spec.column("id1")),
        id2=id_values(table.column(spec.column("id2")), path, spec.column("id2")),
        text1=tuple(text_column(table, spec.column("sentence1"))),
        text2=tuple(text_column(table, spec.column("sentence2"))),
        label=duplicate_flags(table.column(spec.column("label")), path, spec.column("label")),
        source=path,
    )
    return split_duplicate_pairs(pairs, spec.holdout_fraction, spec.split_seed, text_key)


def _capped(rows: np.ndarray, groups: np.ndarray, spec: DataSpec) -> np.ndarray:
    """``rows`` with at most ``spec.max_pairs_per_group`` of each group (a seeded choice),
    in file order; logs what was left out."""
    cap = spec.max_pairs_per_group
    if cap is None:
        return rows
    if cap < 1:
        raise ValueError(f"max_pairs_per_group must be >= 1 or null, got {cap}")
    order = np.random.default_rng(spec.split_seed).permutation(rows.size)
    # Position of each pair within its group, in the random order.
    by_group = order[np.argsort(groups[order], kind="stable")]
    sorted_groups = groups[by_group]
    starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    rank = np.arange(rows.size) - np.repeat(starts, np.diff(np.r_[starts, rows.size]))
    kept = np.sort(by_group[rank < cap])
    if kept.size < rows.size:
        over = int(np.sum(np.diff(np.r_[starts, rows.size]) > cap))
        logger.warning(
            "%s: max_pairs_per_group %d keeps %d of %d duplicate pairs (%d pairs of %d larger "
            "groups left out)",
            spec.path,
            cap,
            kept.size,
            rows.size,
            rows.size - kept.size,
            over,
        )
    return rows[kept]


def _read_spec(spec: DataSpec) -> Table:
    """The table of ``spec``, checked: path, kind, roles, limit, required columns, any rows."""
    if not spec.path:
        raise ValueError("a data spec needs a path")
    if spec.kind not in ROLES:
        raise ValueError(f"unknown data kind {spec.kind!r}; valid kinds: {', '.join(DATA_KINDS)}")
    roles = ROLES[spec.kind]
    unknown = sorted(set(spec.columns) - set(roles))
    if unknown:
        raise ValueError(
            f"{spec.path}: columns names role(s) {', '.join(unknown)} that {spec.kind} does not "
            f"have; its roles are: {', '.join(roles)}"
        )
    if spec.limit is not None and spec.limit < 1:
        raise ValueError(f"limit must be >= 1, got {spec.limit}")
    if spec.part not in get_args(SplitPart):
        raise ValueError(f"part must be one of {', '.join(get_args(SplitPart))}, got {spec.part!r}")
    if spec.part != "all" and spec.kind != "duplicate_pairs":
        raise ValueError(f"{spec.path}: part {spec.part!r} needs kind duplicate_pairs")
    if spec.hard_negatives.enabled and spec.kind != "duplicate_pairs":
        raise ValueError(f"{spec.path}: hard_negatives need kind duplicate_pairs")
    spec.hard_negatives.check()
    table = read_table(spec.path, spec.format)
    table.require([spec.column(role) for role in roles])
    if spec.limit is not None:
        table = Table(table.path, table.columns, table.rows[: spec.limit])
    if not table.rows:
        raise DataFileError(f"{table.path}: no examples (the file has no data rows)")
    return table


def nli_triplets(
    premises: Sequence[str],
    hypotheses: Sequence[str],
    labels: Sequence[int],
    label_names: Sequence[str] = NLI_LABELS,
    *,
    source: str = "",
) -> ExampleSet:
    """(premise, entailed hypothesis, contradicting hypothesis) triplets from NLI pairs.

    Premises keep their first-seen order. Each entailed hypothesis of a premise forms one
    triplet, with the premise's contradictions taken in turn as negatives; premises lacking
    either label give none.

    Raises:
        ValueError: ``label_names`` lacks ``entailment`` or ``contradiction``.
        DataFileError: no premise has both an entailment and a contradiction.
    """
    names = list(label_names)
    if "entailment" not in names or "contradiction" not in names:
        raise ValueError(f"{source}: NLI triplets need the labels entailment and contradiction")
    entailment, contradiction = names.index("entailment"), names.index("contradiction")
    by_premise: dict[str, tuple[list[str], list[str]]] = {}
    for premise, hypothesis, label in zip(premises, hypotheses, labels, strict=True):
        positives, negatives = by_premise.setdefault(premise, ([], []))
        if label == entailment:
            positives.append(hypothesis)
        elif label == contradiction:
            negatives.append(hypothesis)
    triplets = [
        (premise, positive, negatives[i % len(negatives)])
        for premise, (positives, negatives) in by_premise.items()
        if negatives
        for i, positive in enumerate(positives)
    ]
    if not triplets:
        raise DataFileError(
            f"{source}: no triplets: no premise has both an entailment and a contradiction"
        )
    anchors, positives, negatives = zip(*triplets, strict=True)
    return ExampleSet("triplets", (anchors, positives, negatives), source=source)


def _scores_in_range(table: Table, column: str, score_range: Sequence[float]) -> np.ndarray:
    low, high = (float(bound) for bound in score_range)
    if not low < high:
        raise ValueError(
            f"score_range must be (low, high) with low < high, got {list(score_range)}"
        )
    scores = np.asarray(float_column(table, column), dtype=np.float64)
    outside = np.flatnonzero((scores < low) | (scores > high))
    if outside.size:
        row = int(outside[0])
        raise DataFileError(
            f"{table.path}: row {row + 1}, column {column!r}: score {scores[row]:g} is outside "
            f"the declared range [{low:g}, {high:g}] ({outside.size} such rows)"
        )
    return ((scores - low) / (high - low)).astype(np.float32)


def _label_indices(table: Table, column: str, label_names: Sequence[str]) -> np.ndarray:
    names = [str(name) for name in label_names]
    if len(names) < 2 or len(set(names)) != len(names):
        raise ValueError(f"labels must list at least two distinct names, got {names}")
    index = {name: i for i, name in enumerate(names)}
    labels = np.empty(len(table.rows), dtype=np.int64)
    for number, value in enumerate(table.column(column), start=1):
        key = value if isinstance(value, str) else None if value is None else str(value)
        if key not in index:
            raise DataFileError(
                f"{table.path}: row {number}, column {column!r}: unknown label {value!r}; "
                f"declared labels: {', '.join(names)}"
            )
        labels[number - 1] = index[key]
    return labels
