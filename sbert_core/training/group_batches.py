"""Batches in which no two examples share a group: in-batch negatives without false negatives.

With in-batch negatives (:class:`sbert_core.training.losses.MultipleNegativesRankingLoss`) every
other positive of a batch is a negative for an anchor. When two examples of one batch are copies of
one text, or two members of one labelled duplicate group, one of them is a duplicate of the
other's anchor and is trained as a negative all the same. Give each example a *group* id
(equal ids: never in one batch) and :func:`group_exclusive_batches` keeps them apart. With a
hard negative per example, its group must also cover the negative's duplicates
(:mod:`sbert_core.training.hard_negatives` merges the two groups).

The rule, per epoch (seeded by ``(seed, epoch)``, the same on every process and rerun):

1. The number of batches is ``B = max(ceil(n / batch_size), largest group)``: one batch per
   member of the largest group is the fewest that can keep its members apart.
2. The groups are shuffled, the members of each group are shuffled, and the examples, group by
   group, are dealt round-robin onto the ``B`` batches. A group of ``s <= B`` members takes
   ``s`` consecutive deals, so ``s`` distinct batches; the deal keeps every batch within one
   example of every other, so each holds ``floor(n / B)`` or ``ceil(n / B) <= batch_size``.
3. The batches, and the examples inside each, are shuffled.

Nothing is dropped or deferred: every example is in exactly one batch of every epoch. The price
of a group larger than ``ceil(n / batch_size)`` is more, smaller batches (fewer negatives per
anchor); :func:`batch_count` reports it so the caller can warn, or cap the group in its data.

Example:
    >>> groups = np.array([0, 0, 1, 2, 2, 2, 3, 4])
    >>> batches = group_exclusive_batches(groups, batch_size=4, seed=42, epoch=0)
    >>> sorted(len(batch) for batch in batches)  # 3 batches: group 2 has 3 members
    [2, 3, 3]
    >>> all(len(set(groups[b])) == len(b) for b in batches)
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sbert_core.training.duplicate_pairs import smallest_node_labels


def check_groups(groups: np.ndarray) -> np.ndarray:
    """``groups`` as a 1-d int64 array.

    Raises:
        ValueError: not 1-d, or not integers.
    """
    groups = np.asarray(groups)
    if groups.ndim != 1 or (groups.size and not np.issubdtype(groups.dtype, np.integer)):
        raise ValueError(
            f"group ids must be a 1-d integer array, got {groups.dtype} {groups.shape}"
        )
    return groups.astype(np.int64, copy=False)


def largest_group(groups: np.ndarray) -> int:
    """Members of the largest group (0 for no examples)."""
    groups = check_groups(groups)
    if not groups.size:
        return 0
    return int(np.unique(groups, return_counts=True)[1].max())


def batch_count(groups: np.ndarray, batch_size: int) -> int:
    """Batches per epoch: ``max(ceil(n / batch_size), largest group)``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    groups = check_groups(groups)
    return max(-(-groups.size // batch_size), largest_group(groups))


def group_exclusive_batches(
    groups: np.ndarray, batch_size: int, seed: int, epoch: int
) -> list[np.ndarray]:
    """The batches (example indices) of ``epoch``; no batch holds two members of one group.

    Args:
        groups: ``(n,)`` integer group id of every example.
        batch_size: the most examples a batch holds.
        seed, epoch: the shuffle; equal arguments give equal batches.

    Returns:
        :func:`batch_count` int64 arrays that partition ``range(n)`` (module docstring).
    """
    groups = check_groups(groups)
    n = groups.size
    if n == 0:
        return []
    count = batch_count(groups, batch_size)
    rng = np.random.default_rng((seed, epoch))
    # Members of each group in a random order, groups in a random order: a random key per
    # example, the group's key first.
    _, group_index = np.unique(groups, return_inverse=True)
    group_key = rng.permutation(group_index.max() + 1)[group_index]
    deal = np.lexsort((rng.random(n), group_key))  # (n,) examples, group by group
    slot = np.arange(n) % count  # consecutive deals go to distinct batches
    by_batch = deal[np.argsort(slot, kind="stable")]
    sizes = np.bincount(slot, minlength=count)
    batches = np.split(by_batch, np.cumsum(sizes)[:-1])
    return [rng.permutation(batches[b]) for b in rng.permutation(count)]


def text_groups(columns: Sequence[Sequence[str]]) -> np.ndarray:
    """``(n,)`` group ids from exact text copies: examples that share a text (in any column)
    share a group, transitively.

    Args:
        columns: one sequence of ``n`` texts per example column.
    """
    n = len(columns[0]) if columns else 0
    first: dict[str, int] = {}
    a, b = [], []
    for column in columns:
        for i, text in enumerate(column):
            a.append(i)
            b.append(first.setdefault(text, i))
    return smallest_node_labels(n, np.array(a, dtype=np.int64), np.array(b, dtype=np.int64))
