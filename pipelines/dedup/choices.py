"""The dedup options' choices and defaults, importable without numpy-heavy modules (the
stage's ``Options`` in ``pipelines/dedup/options.py`` reads them for ``--help``)."""

from __future__ import annotations

from typing import Literal

Method = Literal["components", "ranked", "star", "split", "mutual", "average"]
# --stable-keep: keep what the previous version kept (pipelines/dedup/previous.py): auto when
# the settings that decide groups are unchanged, on always, off never.
StableKeep = Literal["auto", "on", "off"]
# --sweep: the threshold sweep runs the chosen method only, or every method (the comparison).
SweepScope = Literal["chosen", "all"]
METHODS: tuple[str, ...] = ("components", "ranked", "star", "split", "mutual", "average")
# The representative policies components compute from the groups themselves
# (pipelines/dedup/groups.py); any other --keep value is a ranking (pipelines/dedup/ranking.py).
KEEP_POLICIES: tuple[str, ...] = ("first", "longest", "central")
# --keep (old spelling: --rank), for every method: which member of a group is kept. first: the
# first in corpus order; longest: most characters; central: the member most like the most
# others; random: drawn with --seed; column:NAME: a numeric corpus field, largest first.
KEEP_CHOICES: tuple[str, ...] = ("first", "longest", "central", "random", "column:NAME")
# Old spellings of --keep values (--rank corpus was --keep first).
KEEP_ALIASES = {"corpus": "first"}
# Star (central ranking, radius T - 0.10) on QQP dev: best pair-F1 0.754 with a largest group
# of 265 at T = 0.80, where components reach 0.772 but with a largest group of 1,210 (1,911 at
# 0.80) that grows with the corpus (benchmarks/results/dedup_qqp.json).
DEFAULT_METHOD = "star"
# Without --keep, components keep the first member (their output since before the other
# methods) and the other methods the central one.
DEFAULT_KEEP = "central"
DEFAULT_COMPONENTS_KEEP = "first"
DEFAULT_RADIUS_GAP = 0.10
DEFAULT_MUTUAL_K = 10
# The columns of a labelled-pairs file by default: Quora Question Pairs' names.
LABEL_ID_A, LABEL_ID_B, LABEL_COLUMN = "qid1", "qid2", "is_duplicate"
# --known-duplicates-field: the corpus field read when the embeddings kept it (the bundled
# sample corpus has it), and the value that turns known duplicates off.
KNOWN_FIELD, NO_KNOWN_FIELD = "duplicate_of", "none"


def canonical_keep(text: str) -> str:
    """A ``--keep`` value with its old spelling replaced (``corpus`` is ``first``)."""
    return KEEP_ALIASES.get(text, text)


def is_keep(text: str) -> bool:
    """Whether ``text`` is one of :data:`KEEP_CHOICES` (``column:`` with a field name)."""
    return text in KEEP_CHOICES[:-1] or (
        text.startswith("column:") and bool(text.partition(":")[2])
    )


def default_keep(method: str) -> str:
    """The ``--keep`` of ``method`` when none is given."""
    return DEFAULT_COMPONENTS_KEEP if method == "components" else DEFAULT_KEEP
