"""Labelled duplicate pairs (Quora Question Pairs style): a component-wise split and groups.

A file of labelled pairs ``(id1, id2, text1, text2, label)`` (label 1: duplicates) is a graph
over its questions. :func:`split_duplicate_pairs` cuts it into a train and a holdout part so that
nothing learned on one part leaks into the other, and gives every question a duplicate group:

* **components**: connected components over every labelled pair (duplicate or not) and over
  copies of one text (two ids whose texts have one key under ``text_key``; by default the exact
  text). A component lies wholly in one part, so no question, no labelled pair and no group
  crosses the split.
* **the split**: a component goes to the holdout when a hash of ``(seed, its smallest question
  id)`` falls below ``holdout_fraction``. The choice depends on the component alone (not on file
  order or on the other components), so the same file, seed and fraction always give the same
  parts; the holdout's share of questions is ``holdout_fraction`` in expectation, not exactly.
* **groups**: connected components over the duplicate pairs and the copies. Two members of one
  group are duplicates (directly, transitively or as copies), so a batch sampler that never puts
  two of them in one batch (:mod:`sbert_core.training.group_batches`) never trains a duplicate as a
  negative.

sbert_core knows no text normalisation; the ``sbert finetune`` job passes the dedup stage's key
(``sbert_pipeline.io.text_normal.text_key``), so copies are the texts dedup treats as one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sbert_core.errors import DataFileError

# The one components helper; group_batches imports it from here too.
from sbert_core.graph import smallest_node_labels

_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no"}


@dataclass(frozen=True)
class DuplicatePairs:
    """Labelled pairs as read: ids and texts of both sides, the duplicate flag per row."""

    id1: tuple[str, ...]
    id2: tuple[str, ...]
    text1: tuple[str, ...]
    text2: tuple[str, ...]
    label: np.ndarray  # (R,) bool: True for a duplicate pair
    source: str = ""


@dataclass(frozen=True)
class DuplicateSplit:
    """Every question of a pairs file with its component, part and duplicate group.

    Attributes:
        ids, texts: the questions, in order of first appearance in the file.
        component: ``(Q,)`` component of the labelled-pair graph (with copies) per question.
        group: ``(Q,)`` duplicate group per question (within its component).
        holdout: ``(Q,)`` True for a question of the holdout part.
        row1, row2: ``(R,)`` question index of each pair's two sides.
        label: ``(R,)`` the duplicate flags.
    """

    ids: tuple[str, ...]
    texts: tuple[str, ...]
    component: np.ndarray
    group: np.ndarray
    holdout: np.ndarray
    row1: np.ndarray
    row2: np.ndarray
    label: np.ndarray

    def rows_in(self, part: str) -> np.ndarray:
        """``(R,)`` bool: the pairs of ``part`` (``train``, ``holdout`` or ``all``)."""
        if part == "all":
            return np.ones(self.row1.size, dtype=bool)
        if part not in ("train", "holdout"):
            raise ValueError(f"part must be all, train or holdout, got {part!r}")
        return self.holdout[self.row1] == (part == "holdout")

    def questions_in(self, part: str) -> np.ndarray:
        """Indices of the questions of ``part``, in file order."""
        if part == "all":
            return np.arange(len(self.ids))
        if part not in ("train", "holdout"):
            raise ValueError(f"part must be all, train or holdout, got {part!r}")
        return np.flatnonzero(self.holdout == (part == "holdout"))


def duplicate_flags(values: Sequence, path: str, column: str) -> np.ndarray:
    """``(R,)`` bool from a 0/1 (or true/false, yes/no) column.

    Raises:
        DataFileError: any other value, naming the file, row (1-based) and column.
    """
    flags = np.empty(len(values), dtype=bool)
    for number, value in enumerate(values, start=1):
        text = str(int(value) if isinstance(value, bool) else value).strip().lower()
        if text in _TRUE or text in _FALSE:
            flags[number - 1] = text in _TRUE
            continue
        raise DataFileError(
            f"{path}: row {number}, column {column!r}: expected a duplicate label 0 or 1, "
            f"got {value!r}"
        )
    return flags


def id_values(values: Sequence, path: str, column: str) -> tuple[str, ...]:
    """Ids as strings (numbers allowed); an empty one raises ``DataFileError`` naming where."""
    out = []
    for number, value in enumerate(values, start=1):
        text = "" if value is None or isinstance(value, bool) else str(value).strip()
        if not text:
            raise DataFileError(
                f"{path}: row {number}, column {column!r}: expected an id, got {value!r}"
            )
        out.append(text)
    return tuple(out)


def split_duplicate_pairs(
    pairs: DuplicatePairs,
    holdout_fraction: float = 0.5,
    seed: int = 0,
    text_key: Callable[[str], str] | None = None,
) -> DuplicateSplit:
    """Components, the train/holdout split and the duplicate groups (module docstring).

    Args:
        pairs: as read.
        holdout_fraction: the expected share of components (and questions) in the holdout.
        seed: which components go to the holdout.
        text_key: texts with one key are copies (default: the exact text).

    Raises:
        ValueError: ``holdout_fraction`` outside ``[0, 1]``.
        DataFileError: one id with two different texts, or a pair of an id with itself.
    """
    if not 0.0 <= holdout_fraction <= 1.0:
        raise ValueError(f"holdout_fraction must lie in [0, 1], got {holdout_fraction}")
    index: dict[str, int] = {}
    texts: list[str] = []
    rows = np.empty((2, len(pairs.id1)), dtype=np.int64)
    sides = (pairs.id1, pairs.text1, pairs.id2, pairs.text2)
    for r, (id1, text1, id2, text2) in enumerate(zip(*sides, strict=True)):
        for side, (qid, text) in enumerate(((id1, text1), (id2, text2))):
            q = index.setdefault(qid, len(texts))
            if q == len(texts):
                texts.append(text)
            elif texts[q] != text:
                raise DataFileError(
                    f"{pairs.source}: row {r + 1}: id {qid!r} has the text {text!r} here and "
                    f"{texts[q]!r} in an earlier row; one id must name one text"
                )
            rows[side, r] = q
    row1, row2 = rows
    same = np.flatnonzero(row1 == row2)
    if same.size:
        r = int(same[0])
        raise DataFileError(
            f"{pairs.source}: row {r + 1}: pairs the id {pairs.id1[r]!r} with itself "
            f"({same.size} such rows)"
        )
    n = len(texts)
    key = text_key or str
    first_of_key: dict[str, int] = {}
    copy_of = np.array([first_of_key.setdefault(key(t), q) for q, t in enumerate(texts)])
    copies = np.flatnonzero(copy_of != np.arange(n))
    label = np.asarray(pairs.label, dtype=bool)
    component = smallest_node_labels(
        n, np.concatenate([row1, copies]), np.concatenate([row2, copy_of[copies]])
    )
    group = smallest_node_labels(
        n, np.concatenate([row1[label], copies]), np.concatenate([row2[label], copy_of[copies]])
    )
    ids = tuple(index)
    smallest: dict[int, str] = {}
    for q, qid in enumerate(ids):
        c = int(component[q])
        if c not in smallest or qid < smallest[c]:
            smallest[c] = qid
    in_holdout = {c: _unit_hash(seed, qid) < holdout_fraction for c, qid in smallest.items()}
    holdout = np.array([in_holdout[int(c)] for c in component], dtype=bool)
    return DuplicateSplit(
        ids=ids,
        texts=tuple(texts),
        component=component,
        group=group,
        holdout=holdout,
        row1=row1,
        row2=row2,
        label=label,
    )


def _unit_hash(seed: int, value: str) -> float:
    """A number in ``[0, 1)`` from ``(seed, value)``, the same on every machine."""
    digest = hashlib.blake2b(f"{seed}\x00{value}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
