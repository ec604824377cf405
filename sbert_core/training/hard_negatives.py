"""Hard negatives for labelled duplicate pairs: (question, duplicate, non-duplicate) triplets.

With in-batch negatives alone (MNRL on ``(anchor, positive)`` pairs) the other questions of a
batch are random ones, mostly on other topics, and the loss is near zero from the start; what
decides dedup F1 on Quora-style data is the same-topic question that is *not* a duplicate. So
each training duplicate pair ``(a, p)`` gets one negative ``n`` (``train.hard_negatives.mode``):

* ``labelled``: a question labelled *not* duplicate of ``a`` or of ``p`` (Quora's own hard
  negatives: its non-duplicate pairs were chosen as same-topic questions);
* ``mined``: one of the ``range_max`` questions nearest to ``a`` by the base model's vectors
  (exact cosine), as sentence-transformers' ``mine_hard_negatives``, with its false-negative
  guards: a candidate scoring above ``(1 - relative_margin) x cos(a, p)`` or above
  ``max_score`` is skipped (it may be an unlabelled duplicate), the nearest remaining one wins;
* ``labelled+mined``: labelled where the pair has one, else mined.

Whatever the mode, a negative is a question of the *train part* of the split (never of the
holdout) and is never in ``a``'s duplicate group (so never a labelled duplicate nor a copy of
``a`` or ``p``). A pair without a candidate gets a random train question of another group
(counted and logged as ``random``), so every example is a triplet.

**Groups for the batch sampler.** MNRL scores every anchor against every positive and every
negative of its batch, so a negative ``n_j`` of another example must not be a duplicate of
anchor ``a_i`` either: no batch may hold ``i`` and ``j`` with ``group(a_i) = group(n_j)``. The
examples' groups are therefore merged: the anchor's duplicate group and the negative's are one
*sampler group* (union-find), and :func:`sbert_core.training.group_batches.group_exclusive_batches`
keeps sampler groups apart. Merging could chain into one giant group (one batch per member),
so a negative is only accepted when the merged group stays within ``cap`` examples (default:
the larger of the largest duplicate group and ``ceil(pairs / 32)``, so that with batches of up
to 32 the epoch needs no more batches than without negatives); the next candidate is tried
otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from sbert_core.errors import DataFileError
from sbert_core.training.duplicate_pairs import DuplicateSplit

logger = logging.getLogger(__name__)

HardNegativeMode = Literal["none", "labelled", "mined", "labelled+mined"]
HARD_NEGATIVE_MODES: tuple[str, ...] = get_args(HardNegativeMode)
# Random questions tried for a pair without a candidate before it is left out.
_RANDOM_TRIES = 64
# The default cap keeps sampler groups within one member per batch for batches of up to this.
_CAP_BATCH = 32


@dataclass
class HardNegativeConfig:
    """``train.hard_negatives`` of a ``duplicate_pairs`` spec (module docstring).

    Example (YAML)::

        hard_negatives: {mode: labelled+mined, vectors: base.npy, vector_ids: base_ids.txt}
    """

    mode: HardNegativeMode = "none"
    # mined: the nearest questions outside the anchor's group that are candidates.
    range_max: int = 10
    # mined: skip candidates with cosine above (1 - relative_margin) x cos(anchor, positive).
    relative_margin: float = 0.05
    # mined: skip candidates with cosine above this (None: no absolute bound).
    max_score: float | None = None
    # mined: the base model's vectors of the questions (a float32 .npy, one row per line of
    # vector_ids, which holds the question ids); every train question needs one.
    vectors: str | None = None
    vector_ids: str | None = None
    # Sampler groups stay within this many examples (None: the larger of the largest duplicate
    # group and ceil(pairs / 32); raise it for larger batches or small data).
    cap: int | None = None

    @property
    def enabled(self) -> bool:
        """Whether the pairs become triplets."""
        return self.mode != "none"

    @property
    def mines(self) -> bool:
        """Whether the base model's vectors are needed."""
        return self.mode in ("mined", "labelled+mined")

    def check(self, files: bool = True) -> None:
        """Raise ``ValueError`` naming the bad ``hard_negatives`` setting (with ``files``:
        also mining without a vectors file)."""
        if self.mode not in HARD_NEGATIVE_MODES:
            raise ValueError(
                f"hard_negatives.mode must be one of {', '.join(HARD_NEGATIVE_MODES)}, "
                f"got {self.mode!r}"
            )
        if self.range_max < 1:
            raise ValueError(f"hard_negatives.range_max must be >= 1, got {self.range_max}")
        if not 0.0 <= self.relative_margin < 1.0:
            raise ValueError(
                f"hard_negatives.relative_margin must lie in [0, 1), got {self.relative_margin}"
            )
        if self.max_score is not None and not -1.0 <= self.max_score <= 1.0:
            raise ValueError(f"hard_negatives.max_score must lie in [-1, 1], got {self.max_score}")
        if self.cap is not None and self.cap < 1:
            raise ValueError(f"hard_negatives.cap must be >= 1 or null, got {self.cap}")
        if (self.vectors is None) != (self.vector_ids is None):
            raise ValueError("hard_negatives.vectors and vector_ids go together")
        if files and self.mines and self.vectors is None:
            raise ValueError(
                f"hard_negatives.mode {self.mode} needs the base model's vectors of the "
                "questions: set hard_negatives.vectors (.npy) and vector_ids (one id a line)"
            )


@dataclass(frozen=True)
class Triplets:
    """The hard negatives of a part's duplicate pairs.

    Attributes:
        keep: ``(R,)`` bool: the pairs that got a negative (the others are left out).
        negative: ``(R,)`` question index of each pair's negative (-1 where left out).
        groups: ``(R,)`` sampler group of each pair (module docstring).
        counts: pairs by where their negative came from (labelled, mined, random, left_out).
    """

    keep: np.ndarray
    negative: np.ndarray
    groups: np.ndarray
    counts: dict[str, int]


def labelled_candidates(split: DuplicateSplit, q1: np.ndarray, q2: np.ndarray) -> list[list[int]]:
    """Per pair, the train-part questions labelled non-duplicate of ``q1`` or ``q2`` and
    outside their duplicate group, in file order (each once)."""
    neighbours: dict[int, list[int]] = {}
    for a, b, dup in zip(split.row1.tolist(), split.row2.tolist(), split.label, strict=True):
        if not dup:
            neighbours.setdefault(a, []).append(b)
            neighbours.setdefault(b, []).append(a)
    out = []
    for a, p in zip(q1.tolist(), q2.tolist(), strict=True):
        group = split.group[a]
        seen: dict[int, None] = {}
        for q in neighbours.get(a, []) + neighbours.get(p, []):
            if not split.holdout[q] and split.group[q] != group:
                seen.setdefault(q, None)
        out.append(list(seen))
    return out


def mined_candidates(
    split: DuplicateSplit,
    vectors: np.ndarray,
    q1: np.ndarray,
    q2: np.ndarray,
    config: HardNegativeConfig,
    block: int = 256,
) -> list[list[int]]:
    """Per pair, the nearest train-part questions to ``q1`` (exact cosine of unit ``vectors``,
    one row per question of ``split``) outside its group, at most ``range_max``, nearest
    first, without those the false-negative guards skip (module docstring)."""
    pool = split.questions_in("train")
    pool_vectors = np.ascontiguousarray(vectors[pool], dtype=np.float32)
    order = np.argsort(split.group[pool], kind="stable")
    sorted_groups = split.group[pool][order]
    k = min(config.range_max, pool.size)
    positive = np.einsum("ij,ij->i", vectors[q1], vectors[q2])
    out: list[list[int]] = []
    for start in range(0, q1.size, block):
        anchors = q1[start : start + block]
        scores = vectors[anchors].astype(np.float32) @ pool_vectors.T  # (b, pool)
        for r, a in enumerate(anchors.tolist()):  # the anchor's group is never a negative
            lo, hi = (
                np.searchsorted(sorted_groups, split.group[a], side="left"),
                np.searchsorted(sorted_groups, split.group[a], side="right"),
            )
            scores[r, order[lo:hi]] = -np.inf
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < pool.size else None
        for r in range(anchors.size):
            columns = top[r] if top is not None else np.arange(pool.size)
            columns = columns[np.argsort(-scores[r, columns], kind="stable")][:k]
            bound = (1.0 - config.relative_margin) * positive[start + r]
            if config.max_score is not None:
                bound = min(bound, config.max_score)
            chosen = columns[(scores[r, columns] <= bound) & np.isfinite(scores[r, columns])]
            out.append(pool[chosen].tolist())
    return out


def build_triplets(
    split: DuplicateSplit,
    q1: np.ndarray,
    q2: np.ndarray,
    config: HardNegativeConfig,
    vectors: np.ndarray | None = None,
    seed: int = 0,
) -> Triplets:
    """One hard negative per pair ``(q1[i], q2[i])`` of the train part, and sampler groups.

    Args:
        split: the component-wise split the pairs come from.
        q1, q2: ``(R,)`` question indices of the pairs (anchor, positive).
        config: the mode and its settings (checked here).
        vectors: ``(Q, d)`` unit rows per question of ``split`` (needed to mine).
        seed: the order pairs pick their negatives in, and the random fallbacks.

    Raises:
        ValueError: a bad config, or mining without vectors.
    """
    config.check(files=False)
    if not config.enabled:
        raise ValueError("build_triplets needs a hard_negatives mode other than none")
    if config.mines and vectors is None:
        raise ValueError(f"hard_negatives.mode {config.mode} needs vectors")
    if split.holdout[q1].any() or split.holdout[q2].any():
        raise ValueError("hard negatives are built for the pairs of the train part only")
    lists: list[Sequence[int]] = [[] for _ in range(q1.size)]
    source = np.zeros(q1.size, dtype=np.int8)  # 0: none yet, 1: labelled, 2: mined
    if config.mode in ("labelled", "labelled+mined"):
        lists = labelled_candidates(split, q1, q2)
        rng = np.random.default_rng((seed, 1))
        lists = [[c[i] for i in rng.permutation(len(c))] for c in lists]
        source[[bool(c) for c in lists]] = 1
    if config.mines:
        need = (
            np.flatnonzero(source == 0) if config.mode == "labelled+mined" else np.arange(q1.size)
        )
        mined = mined_candidates(split, vectors, q1[need], q2[need], config)
        for i, candidates in zip(need.tolist(), mined, strict=True):
            lists[i] = candidates
            source[i] = 2 if candidates else 0
    return _assign(split, q1, lists, source, config.cap, seed)


def _assign(
    split: DuplicateSplit,
    q1: np.ndarray,
    lists: list[Sequence[int]],
    source: np.ndarray,
    cap: int | None,
    seed: int,
) -> Triplets:
    """Pick each pair's first candidate that keeps its sampler group within ``cap`` examples
    (merging groups by union-find), a random train question where none does."""
    group = split.group
    anchor_group = group[q1]
    parent = np.arange(len(split.ids), dtype=np.int64)  # over group ids (question indices)
    size = np.bincount(anchor_group, minlength=len(split.ids)).astype(np.int64)
    cap = max(int(size.max()), -(-q1.size // _CAP_BATCH)) if cap is None else cap

    def root(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = int(parent[g])
        return g

    def join(a: int, q: int) -> bool:
        ra, rq = root(a), root(int(group[q]))
        if ra == rq:
            return True
        if size[ra] + size[rq] > cap:
            return False
        small, big = sorted((ra, rq))
        parent[big], size[small] = small, size[small] + size[big]
        return True

    rng = np.random.default_rng((seed, 2))
    pool = split.questions_in("train")
    negative = np.full(q1.size, -1, dtype=np.int64)
    names = ("random", "labelled", "mined")
    counts = dict.fromkeys((*names[1:], "random", "left_out"), 0)
    for i in rng.permutation(q1.size).tolist():
        a = int(anchor_group[i])
        chosen = next((q for q in lists[i] if join(a, q)), None)
        kind = names[source[i]] if chosen is not None else "random"
        if chosen is None:
            for q in rng.choice(pool, min(_RANDOM_TRIES, pool.size)).tolist():
                if group[q] != a and join(a, q):
                    chosen = q
                    break
        if chosen is None:
            counts["left_out"] += 1
            continue
        negative[i] = chosen
        counts[kind] += 1
    keep = negative >= 0
    groups = np.array([root(int(g)) for g in anchor_group], dtype=np.int64)
    return Triplets(keep=keep, negative=negative, groups=groups, counts=counts)


def read_stored_vectors(
    vectors: str, vector_ids: str, section: str
) -> tuple[np.ndarray, dict[str, int]]:
    """Vectors made beforehand (``.npy``, memory-mapped) and the row of each id (a text file
    of ids, one per line, in the rows' order), as a config ``section`` names them.

    Raises:
        DataFileError: unreadable files, or a row count that differs from the ids.
    """
    try:
        ids = Path(vector_ids).read_text(encoding="utf-8").splitlines()
        stored = np.load(vectors, mmap_mode="r")
    except (OSError, ValueError) as err:
        raise DataFileError(f"{section}.vectors: cannot read {err}") from err
    if stored.ndim != 2 or stored.shape[0] != len(ids):
        raise DataFileError(f"{vectors}: {stored.shape} vectors for {len(ids)} ids in {vector_ids}")
    return stored, {qid: i for i, qid in enumerate(ids)}


def load_vectors(config: HardNegativeConfig, split: DuplicateSplit) -> np.ndarray:
    """``(Q, d)`` unit float32 rows per question of ``split`` from ``config.vectors`` (rows of
    holdout questions are zero: they are never read).

    Raises:
        DataFileError: unreadable files, a row count that differs from the ids, or a train
            question without a vector.
    """
    stored, row = read_stored_vectors(config.vectors, config.vector_ids, "hard_negatives")
    train = split.questions_in("train")
    missing = [split.ids[q] for q in train if split.ids[q] not in row]
    if missing:
        raise DataFileError(
            f"{config.vector_ids}: {len(missing)} train questions have no vector "
            f"(first {missing[0]!r})"
        )
    vectors = np.zeros((len(split.ids), stored.shape[1]), dtype=np.float32)
    vectors[train] = stored[[row[split.ids[q]] for q in train]]
    norms = np.linalg.norm(vectors[train], axis=1, keepdims=True)
    vectors[train] /= np.maximum(norms, 1e-12)
    return vectors


def log_counts(source: str, triplets: Triplets) -> None:
    """One line: where the negatives came from, and the sampler groups."""
    kept = int(triplets.keep.sum())
    logger.info(
        "%s: hard negatives for %d duplicate pairs: %s; %d sampler groups, the largest has %d "
        "pairs",
        source,
        kept,
        ", ".join(f"{count} {name}" for name, count in triplets.counts.items()),
        np.unique(triplets.groups[triplets.keep]).size,
        int(np.unique(triplets.groups[triplets.keep], return_counts=True)[1].max()) if kept else 0,
    )


def triplet_texts(
    split: DuplicateSplit,
    q1: np.ndarray,
    q2: np.ndarray,
    config: HardNegativeConfig,
    seed: int,
    source: str,
) -> tuple[tuple[tuple[str, ...], ...], np.ndarray]:
    """The ``(anchor, positive, negative)`` text columns and sampler groups of the pairs that
    got a negative (the vectors read from ``config.vectors`` where it mines); logs the counts.

    Raises:
        ValueError / DataFileError: as :func:`build_triplets` and :func:`load_vectors`.
    """
    config.check()
    vectors = load_vectors(config, split) if config.mines else None
    triplets = build_triplets(split, q1, q2, config, vectors, seed)
    log_counts(source, triplets)
    if not triplets.keep.any():
        raise DataFileError(
            f"{source}: no duplicate pair got a hard negative within sampler groups of "
            f"{config.cap if config.cap is not None else 'the default cap of'} pairs; raise "
            "hard_negatives.cap"
        )
    if triplets.counts["left_out"]:
        logger.warning(
            "%s: %d duplicate pairs left out: no train question outside their group fits "
            "their sampler group (hard_negatives.cap %s); raise the cap to keep them",
            source,
            triplets.counts["left_out"],
            config.cap,
        )
    keep = triplets.keep
    columns = tuple(
        tuple(split.texts[q] for q in side[keep].tolist()) for side in (q1, q2, triplets.negative)
    )
    return columns, triplets.groups[keep]
