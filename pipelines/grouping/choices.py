"""The grouping methods' names, keep policies and defaults (numpy-free: options read them)."""

from __future__ import annotations

from typing import Literal

Method = Literal["components", "ranked", "star", "split", "mutual", "average"]
METHODS: tuple[str, ...] = ("components", "ranked", "star", "split", "mutual", "average")
# The methods that cut groups at a radius (the others ignore it).
RADIUS_METHODS: tuple[str, ...] = ("star", "split")
# The keep policies components compute from the groups themselves; any other keep value is a
# ranking (grouping/ranking.py).
KEEP_POLICIES: tuple[str, ...] = ("first", "longest", "central")
# Which member of a group is kept, for every method. first: the first in corpus order;
# longest: most characters; central: the member most like the most others; random: drawn
# with a seed; column:NAME: a numeric corpus field, largest first.
KEEP_CHOICES: tuple[str, ...] = ("first", "longest", "central", "random", "column:NAME")
# Old spellings of keep values (corpus was first).
KEEP_ALIASES = {"corpus": "first"}
# Star (central ranking, radius T - 0.10) on QQP dev: best pair-F1 0.754 with a largest group
# of 265 at T = 0.80, where components reach 0.772 but with a largest group of 1,210 (1,911 at
# 0.80) that grows with the corpus (benchmarks/results/dedup_qqp.json).
DEFAULT_METHOD = "star"
# Without a keep policy, components keep the first member (their output since before the other
# methods) and the other methods the central one.
DEFAULT_KEEP = "central"
DEFAULT_COMPONENTS_KEEP = "first"
DEFAULT_RADIUS_GAP = 0.10
DEFAULT_MUTUAL_K = 10


def canonical_keep(text: str) -> str:
    """A keep value with its old spelling replaced (``corpus`` is ``first``)."""
    return KEEP_ALIASES.get(text, text)


def is_keep(text: str) -> bool:
    """Whether ``text`` is one of :data:`KEEP_CHOICES` (``column:`` with a field name)."""
    return text in KEEP_CHOICES[:-1] or (
        text.startswith("column:") and bool(text.partition(":")[2])
    )


def default_keep(method: str) -> str:
    """The keep policy of ``method`` when none is given."""
    return DEFAULT_COMPONENTS_KEEP if method == "components" else DEFAULT_KEEP
