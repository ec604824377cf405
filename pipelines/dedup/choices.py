"""The dedup options' choices and defaults, importable without numpy-heavy modules (the
stage's ``Options`` in ``pipelines/dedup/options.py`` reads them for ``--help``)."""

from __future__ import annotations

from typing import Literal

Method = Literal["components", "ranked", "star", "split", "mutual", "average"]
METHODS: tuple[str, ...] = ("components", "ranked", "star", "split", "mutual", "average")
# components' --keep: which member of a connected component is kept.
KeepPolicy = Literal["first", "longest", "central"]
KEEP_POLICIES: tuple[str, ...] = ("first", "longest", "central")
# --keep given to a method other than components means the ranking of the same name.
KEEP_AS_RANK = {"first": "corpus", "longest": "longest", "central": "central"}
# --rank values; "column:NAME" ranks by a numeric corpus field (largest first).
RANKINGS: tuple[str, ...] = ("corpus", "longest", "central", "random", "column:NAME")
# Star (central ranking, radius T - 0.10) on QQP dev: best pair-F1 0.754 with a largest group
# of 265 at T = 0.80, where components reach 0.772 but with a largest group of 1,210 (1,911 at
# 0.80) that grows with the corpus (benchmarks/results/dedup_qqp.json).
DEFAULT_METHOD = "star"
DEFAULT_RANK = "central"
DEFAULT_RADIUS_GAP = 0.10
DEFAULT_MUTUAL_K = 10
# The columns of a labelled-pairs file by default: Quora Question Pairs' names.
LABEL_ID_A, LABEL_ID_B, LABEL_COLUMN = "qid1", "qid2", "is_duplicate"
# --known-duplicates-field: the corpus field read when the embeddings kept it (the bundled
# sample corpus has it), and the value that turns known duplicates off.
KNOWN_FIELD, NO_KNOWN_FIELD = "duplicate_of", "none"


def is_ranking(text: str) -> bool:
    """Whether ``text`` is one of :data:`RANKINGS` (``column:`` with a field name)."""
    return text in RANKINGS[:-1] or (text.startswith("column:") and bool(text.partition(":")[2]))
