"""The grouping methods' names, keep policies and defaults (numpy-free: options read them)."""

from __future__ import annotations

from typing import Literal

Method = Literal["components", "ranked", "star", "split", "mutual", "average"]
METHODS: tuple[str, ...] = ("components", "ranked", "star", "split", "mutual", "average")
# The methods that cut groups at a radius (the others ignore it).
RADIUS_METHODS: tuple[str, ...] = ("star", "split")
# The methods whose every removed row is at or above the radius (the threshold unless a lower
# radius is given) to its kept row. The others may remove a row below the threshold to its
# kept row: components and mutual chain (A ~ B ~ C), average merges on a mean score.
TIGHT_METHODS: tuple[str, ...] = ("ranked", "star", "split")
# The keep policies components compute from the groups themselves; any other keep value is a
# ranking (grouping/ranking.py).
KEEP_POLICIES: tuple[str, ...] = ("first", "longest", "central")
# Which member of a group is kept, for every method. first: the first in corpus order;
# longest: most characters; central: the member most like the most others; random: drawn
# with a seed; column:NAME: a numeric corpus field, largest first.
KEEP_CHOICES: tuple[str, ...] = ("first", "longest", "central", "random", "column:NAME")
# Old spellings of keep values (corpus was first).
KEEP_ALIASES = {"corpus": "first"}
# Star with its radius at the threshold: every removed row is >= T to its kept row, what
# "threshold" means elsewhere (SemHash, sentence-transformers). On QQP dev it gives the best
# pair-F1 of the methods that hold that rule, every group far under the size limit
# (benchmarks/results/dedup_qqp.json, docs/dedup.md).
DEFAULT_METHOD = "star"
# One keep policy for every method: central keeps the member most like the others, so the
# most members are within the threshold of the kept row (star and ranked find more
# duplicates with it than with first, and it needs no corpus order).
DEFAULT_KEEP = "central"
# The radius is the threshold unless --radius says otherwise.
DEFAULT_RADIUS_GAP = 0.0
DEFAULT_MUTUAL_K = 10
# The largest group a run publishes: a larger one is split (grouping/limit.py). Review-sized,
# and far above the largest group of the default settings on QQP dev (a few hundred).
DEFAULT_MAX_GROUP_SIZE = 1000


def canonical_keep(text: str) -> str:
    """A keep value with its old spelling replaced (``corpus`` is ``first``)."""
    return KEEP_ALIASES.get(text, text)


def is_keep(text: str) -> bool:
    """Whether ``text`` is one of :data:`KEEP_CHOICES` (``column:`` with a field name)."""
    return text in KEEP_CHOICES[:-1] or (
        text.startswith("column:") and bool(text.partition(":")[2])
    )


def holds_threshold(method: str, radius: float | None, threshold: float) -> bool:
    """Whether ``method`` removes only rows at or above ``threshold`` to their kept row
    (``radius``: the star/split radius used, None for the other methods)."""
    if method not in TIGHT_METHODS:
        return False
    return radius is None or radius >= threshold
