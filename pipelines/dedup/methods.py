"""Duplicate groups by several methods, from similar pairs and a ranking (Beam-free).

Items are the rows ``0 .. n-1``; pairs are :class:`pipelines.dedup.groups.IndexedPairs` (``a < b``,
float32 scores, each pair once), typically every pair at or above a low floor (e.g. 0.70).
Scores and thresholds are compared in float32, as the pairs stage compares them.

A *ranking* (:func:`rank_items`) orders the items by preference: rank 0 is kept first. Every
method returns a :class:`Grouping`: a group number per item (-1 for an item in no group), one
representative per group (the kept member), and for every removed member the row it was
matched to (its representative), that pair's score and a reason.

Methods (``threshold`` is ``T``):

* ``components``: the connected components of the pairs ``>= T``, representative the
  best-ranked member. This is what :func:`pipelines.dedup.groups.deduplicate` computes; on real
  question corpora it chains (A ~ B ~ C ~ ... puts distinct questions in one giant group).
* ``ranked``: SemDeDup's rule as in NeMo Curator. Items are visited in rank order; an item is
  removed when a *kept*, better-ranked item has a score ``>= T`` with it, and joins the group
  of the most similar such item; otherwise it is kept. Every member of a group is ``>= T`` to
  its representative, so groups cannot chain, but two duplicates claimed by two different kept
  items end up apart.
* ``star``: components at ``T``, each split by the ranked rule at a looser radius
  ``rep_threshold <= T`` using only pairs inside the component: a tight component whose
  members are all ``>= rep_threshold`` to its best-ranked member stays whole (components'
  recall), a chain is cut into stars of radius ``rep_threshold``.
* ``split``: components at ``T``; a component with a member below ``rep_threshold`` to its
  best-ranked member is split into its components at ``T + 0.01``, and so on until every
  member of every group is ``>= rep_threshold`` to its representative: chains are cut at their
  weakest links while tight components stay whole.
* ``mutual``: components over the pairs ``>= T`` where each end is among the other's ``k``
  nearest neighbours (mutual k-nearest neighbours): a hub cannot link everything near it.
* ``average``: average-linkage agglomerative clustering over the pair graph, merging while the
  mean score between two clusters is ``>= T``. Pairs not given (scores below the floor) count
  as ``missing_score``. Merge heights never increase (the mean of a merged cluster is a
  weighted mean of its parts' means), so one run down to the lowest threshold gives every
  higher threshold as a prefix of the merges (:class:`Dendrogram`).

Example:
    >>> rank = rank_items("central", n, pairs=pairs, threshold=0.8)
    >>> groups = group_items("star", n, pairs, 0.8, rank, rep_threshold=0.75)
    >>> groups.kept.sum() + groups.n_removed == n
    True
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numba
import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from pipelines.dedup.groups import DuplicateGroups, IndexedPairs

Method = Literal["components", "ranked", "star", "split", "mutual", "average"]
METHODS: tuple[str, ...] = ("components", "ranked", "star", "split", "mutual", "average")
RankPolicy = Literal["first", "longest", "central", "column", "random"]
RANK_POLICIES: tuple[str, ...] = ("first", "longest", "central", "column", "random")

# Why a member is in its group. Code 0 is "kept" (a representative or an item in no group).
REASONS: tuple[str, ...] = (
    "kept",
    "similar to its representative",
    "joined through other members",
)
KEPT, NEAR_REPRESENTATIVE, THROUGH_MEMBERS = 0, 1, 2


@dataclass(frozen=True)
class Grouping:
    """Duplicate groups from one method at one threshold.

    Groups are numbered ``0 .. G-1`` by size descending, equal sizes by their representative's
    rank.
    """

    method: str
    threshold: float
    group: np.ndarray  # (n,) int64, -1 for an item in no group
    representative: np.ndarray  # (n,) bool, the one kept member of each group
    sizes: np.ndarray  # (G,) int64 members per group
    matched: np.ndarray  # (n,) int64: a removed item's representative row, -1 for kept items
    matched_score: np.ndarray  # (n,) float32: score with it, NaN if kept or not a given pair
    # (n,) int8 index into REASONS: "similar to its representative" when matched_score reaches
    # the threshold (star: rep_threshold), else "joined through other members".
    reason: np.ndarray
    pairs_used: int  # pairs at or above the threshold

    @property
    def n(self) -> int:
        """Items in all."""
        return len(self.group)

    @property
    def removed(self) -> np.ndarray:
        """``(n,)`` bool: group members other than the representative."""
        return (self.group >= 0) & ~self.representative

    @property
    def kept(self) -> np.ndarray:
        """``(n,)`` bool: representatives and items in no group."""
        return ~self.removed

    @property
    def n_removed(self) -> int:
        """Items removed."""
        return int(self.sizes.sum()) - len(self.sizes)

    @property
    def n_groups(self) -> int:
        """Groups of two or more items."""
        return len(self.sizes)

    @property
    def largest(self) -> int:
        """Size of the largest group (0 when there are none)."""
        return int(self.sizes.max()) if len(self.sizes) else 0

    def labels(self) -> np.ndarray:
        """``(n,)`` int64 partition label: the group, or ``G + row`` for an item in no group."""
        out = self.group.copy()
        alone = out < 0
        out[alone] = len(self.sizes) + np.flatnonzero(alone)
        return out

    def reasons(self) -> list[str]:
        """The reason of every item, as text."""
        return [REASONS[code] for code in self.reason.tolist()]

    def to_duplicate_groups(self, policy: str) -> DuplicateGroups:
        """The same groups as :class:`pipelines.dedup.groups.DuplicateGroups` (for its writers)."""
        return DuplicateGroups(
            threshold=self.threshold,
            policy=policy,
            group=self.group,
            representative=self.representative,
            sizes=self.sizes,
            pairs_used=self.pairs_used,
        )


# ---------------------------------------------------------------------------- rankings


def rank_items(
    policy: RankPolicy,
    n: int,
    *,
    order_rank: np.ndarray | None = None,
    text_lengths: np.ndarray | None = None,
    values: np.ndarray | None = None,
    descending: bool = True,
    pairs: IndexedPairs | None = None,
    threshold: float | None = None,
    seed: int = 0,
) -> np.ndarray:
    """``(n,)`` int64 distinct ranks, 0 the most preferred item; every tie goes to ``order_rank``.

    Args:
        policy: ``first`` (corpus order: ``order_rank``), ``longest`` (most characters),
            ``central`` (largest sum of scores of its pairs ``>= threshold``, i.e. the item most
            like the most others), ``column`` (by ``values``), ``random`` (a permutation drawn
            from ``seed``).
        n: number of items.
        order_rank: ``(n,)`` distinct integers, corpus order (default: row order).
        text_lengths: ``(n,)`` characters per text, negative where unknown (``longest``).
        values: ``(n,)`` a numeric metadata column, NaN where missing (``column``).
        descending: for ``column``: the largest value first (else the smallest).
        pairs, threshold: for ``central``.
        seed: for ``random``.

    Raises:
        ValueError: an unknown policy, or what the policy needs is missing for some item that
            has a pair (at or above ``threshold`` when given).
    """
    if policy not in RANK_POLICIES:
        raise ValueError(f"unknown ranking {policy!r}; choose one of {', '.join(RANK_POLICIES)}")
    order = np.arange(n, dtype=np.int64) if order_rank is None else np.asarray(order_rank, np.int64)
    if order.shape != (n,) or len(np.unique(order)) != n:
        raise ValueError(f"order_rank must hold {n} distinct integers")
    if policy == "first":
        key = np.zeros(n)
    elif policy == "random":
        return _inverse(np.random.default_rng(seed).permutation(n))
    elif policy == "central":
        if pairs is None or threshold is None:
            raise ValueError("the central ranking needs the pairs and the threshold")
        used = pairs.above(threshold)
        weight = np.bincount(used.a, weights=used.scores, minlength=n)
        weight += np.bincount(used.b, weights=used.scores, minlength=n)
        key = -weight
    else:
        name, column = ("text lengths", text_lengths) if policy == "longest" else ("values", values)
        if column is None:
            raise ValueError(f"the {policy} ranking needs the {name} of the items")
        column = np.asarray(column, np.float64)
        if column.shape != (n,):
            raise ValueError(f"{name} must hold one value per item ({n}), got {column.shape}")
        unknown = np.isnan(column) | ((column < 0) if policy == "longest" else False)
        needed = _paired(n, pairs, threshold)
        missing = int(np.sum(unknown & needed))
        if missing:
            raise ValueError(
                f"the {policy} ranking needs the {name} of every paired item; {missing} of "
                f"{int(needed.sum())} are missing"
            )
        # Items without a needed value have no pair, so their place does not matter: last.
        column = np.where(unknown, -np.inf if policy == "longest" or descending else np.inf, column)
        key = -column if policy == "longest" or descending else column
    return _inverse(np.lexsort((order, key)))


def _paired(n: int, pairs: IndexedPairs | None, threshold: float | None) -> np.ndarray:
    """``(n,)`` bool: items with a pair (at or above the threshold); all items without pairs."""
    if pairs is None:
        return np.ones(n, bool)
    used = pairs if threshold is None else pairs.above(threshold)
    out = np.zeros(n, bool)
    out[used.a] = out[used.b] = True
    return out


def _inverse(order: np.ndarray) -> np.ndarray:
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank


# ---------------------------------------------------------------------------- methods


def group_items(
    method: Method,
    n: int,
    pairs: IndexedPairs,
    threshold: float,
    rank: np.ndarray,
    *,
    rep_threshold: float | None = None,
    k: int = 5,
    missing_score: float = 0.0,
) -> Grouping:
    """Duplicate groups of ``n`` items at ``threshold`` by ``method`` (module docstring).

    Args:
        method: one of :data:`METHODS`.
        n: number of items.
        pairs: unique pairs over the rows; only ``average`` reads pairs below ``threshold``.
        threshold: cosine threshold, in ``[-1, 1]``.
        rank: ``(n,)`` distinct ranks (:func:`rank_items`); the best-ranked member of a group
            is its representative.
        rep_threshold: ``star``, ``split``: the radius around a representative (default
            ``threshold``).
        k: ``mutual``: neighbours per item.
        missing_score: ``average``: the score of a pair that is not given.

    Raises:
        ValueError: an unknown method, a bad threshold, rank, ``rep_threshold`` or ``k``.
    """
    _check_inputs(n, pairs, threshold, rank)
    if method == "components":
        return components(n, pairs, threshold, rank)
    if method == "ranked":
        return ranked(n, pairs, threshold, rank)
    if method == "star":
        return star(
            n, pairs, threshold, rank, threshold if rep_threshold is None else rep_threshold
        )
    if method == "split":
        radius = threshold if rep_threshold is None else rep_threshold
        return split(n, pairs, threshold, rank, radius)
    if method == "mutual":
        return mutual(n, pairs, threshold, rank, k)
    if method == "average":
        return average_linkage(n, pairs, threshold, missing_score).cut(threshold, rank, pairs)
    raise ValueError(f"unknown dedup method {method!r}; choose one of {', '.join(METHODS)}")


def sweep_groupings(
    method: Method,
    n: int,
    pairs: IndexedPairs,
    thresholds: Sequence[float],
    rank_at: Callable[[float], np.ndarray],
    *,
    rep_threshold: Callable[[float], float] | None = None,
    k: int = 5,
    missing_score: float = 0.0,
) -> Iterator[Grouping]:
    """:func:`group_items` at every threshold, in the order given.

    ``average`` builds one dendrogram down to the lowest threshold and cuts it at each.

    Args:
        rank_at: the ranking to use at a threshold (``central`` depends on it).
        rep_threshold: ``star``, ``split``: the radius at a threshold (default: the threshold).
        k, missing_score: as for :func:`group_items`.
    """
    if method == "average" and len(thresholds):
        tree = average_linkage(n, pairs, min(thresholds), missing_score)
        for threshold in thresholds:
            yield tree.cut(threshold, rank_at(threshold), pairs)
        return
    for threshold in thresholds:
        radius = None if rep_threshold is None else rep_threshold(threshold)
        yield group_items(
            method,
            n,
            pairs,
            threshold,
            rank_at(threshold),
            rep_threshold=radius,
            k=k,
            missing_score=missing_score,
        )


def components(n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray) -> Grouping:
    """Connected components of the pairs ``>= threshold``; representative the best-ranked."""
    _check_inputs(n, pairs, threshold, rank)
    used = pairs.above(threshold)
    return _from_labels("components", threshold, _component_labels(n, used.a, used.b), rank, pairs)


def ranked(n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray) -> Grouping:
    """SemDeDup's rule: remove an item ``>= threshold`` to a kept better-ranked item."""
    _check_inputs(n, pairs, threshold, rank)
    used = pairs.above(threshold)
    return _ranked_grouping("ranked", n, used, threshold, rank, pairs)


def star(
    n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray, rep_threshold: float
) -> Grouping:
    """Components at ``threshold``, each split by the ranked rule at ``rep_threshold``."""
    _check_inputs(n, pairs, threshold, rank)
    if not -1.0 <= rep_threshold <= threshold:
        raise ValueError(
            f"rep_threshold must lie in [-1, threshold={threshold}], got {rep_threshold}"
        )
    used = pairs.above(threshold)
    component = _component_labels(n, used.a, used.b)
    loose = pairs.above(rep_threshold)
    inside = component[loose.a] == component[loose.b]
    edges = IndexedPairs(loose.a[inside], loose.b[inside], loose.scores[inside])
    return _ranked_grouping("star", n, edges, threshold, rank, pairs, rep_threshold)


def split(
    n: int,
    pairs: IndexedPairs,
    threshold: float,
    rank: np.ndarray,
    rep_threshold: float,
    step: float = 0.01,
) -> Grouping:
    """Components at ``threshold``; a component with a member ``< rep_threshold`` to its
    best-ranked member (or without a given pair to it) is split into its components at
    ``threshold + step``, and so on, until every group passes.

    So a group is a component of the pairs at some level ``>= threshold`` within its parent,
    and every member is ``>= rep_threshold`` to the representative: tight components stay
    whole, chains are cut at their weakest links, never into loose stars.
    """
    _check_inputs(n, pairs, threshold, rank)
    if not -1.0 <= rep_threshold <= threshold:
        raise ValueError(
            f"rep_threshold must lie in [-1, threshold={threshold}], got {rep_threshold}"
        )
    if step <= 0:
        raise ValueError(f"step must be positive, got {step}")
    used = pairs.above(threshold)
    by_rank = np.empty(n, np.int64)
    by_rank[rank] = np.arange(n)
    final = np.full(n, -1, np.int64)
    active = np.ones(n, bool)
    level, next_label = threshold, 0
    while active.any():
        edge = (used.scores >= np.float32(level)) & active[used.a] & active[used.b]
        labels = _component_labels(n, used.a[edge], used.b[edge])
        rows = np.flatnonzero(active)
        _, inverse = np.unique(labels[rows], return_inverse=True)
        inverse = inverse.reshape(-1)
        best = np.full(inverse.max() + 1, np.iinfo(np.int64).max)
        np.minimum.at(best, inverse, rank[rows])
        head = by_rank[best][inverse]
        near = (rows == head) | (_lookup_scores(pairs, n, rows, head) >= np.float32(rep_threshold))
        passes = np.ones(len(best), bool)
        np.logical_and.at(passes, inverse, near)
        # Without edges every component is one item and passes, so the loop ends.
        settled = passes[inverse] | (not edge.any())
        final[rows[settled]] = next_label + inverse[settled]
        next_label += len(best)
        active[rows[settled]] = False
        level = round(level + step, 6)
    return _from_labels("split", threshold, final, rank, pairs, radius=rep_threshold)


def mutual(n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray, k: int) -> Grouping:
    """Components over the pairs ``>= threshold`` whose ends are each in the other's top ``k``.

    A neighbour's place in an item's list is by score descending, then row ascending (as
    :func:`pipelines.vectors.allpairs.self_topk` orders them). Every neighbour that precedes a pair
    ``>= threshold`` in a list is itself ``>= threshold``, so the places are exact whenever the
    pairs hold every pair ``>= threshold``.
    """
    _check_inputs(n, pairs, threshold, rank)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    used = pairs.above(threshold)
    places = _neighbour_places(used.a, used.b, used.scores, n)
    mutual_edge = (places[: len(used)] < k) & (places[len(used) :] < k)
    labels = _component_labels(n, used.a[mutual_edge], used.b[mutual_edge])
    return _from_labels("mutual", threshold, labels, rank, pairs)


def _neighbour_places(a: np.ndarray, b: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """``(2P,)``: the place of ``b`` in ``a``'s neighbour list for every pair, then the place
    of ``a`` in ``b``'s (0 = nearest)."""
    row, other = np.concatenate([a, b]), np.concatenate([b, a])
    order = np.lexsort((other, -np.concatenate([scores, scores]), row))
    sorted_row = row[order]
    starts = np.searchsorted(sorted_row, np.arange(n))
    place = np.empty(len(row), np.int64)
    place[order] = np.arange(len(row)) - starts[sorted_row]
    return place


# ---------------------------------------------------------------------------- average linkage


@dataclass(frozen=True)
class Dendrogram:
    """Average-linkage merges, highest first: merge ``i`` joins the clusters holding the rows
    ``left[i]`` and ``right[i]`` at mean score ``height[i]`` (non-increasing)."""

    n: int
    left: np.ndarray  # (M,) int64 a row of one cluster
    right: np.ndarray  # (M,) int64 a row of the other
    height: np.ndarray  # (M,) float64
    missing_score: float
    stop: float  # merges were made down to this mean score

    def cut(self, threshold: float, rank: np.ndarray, pairs: IndexedPairs) -> Grouping:
        """The clusters of every merge at mean score ``>= threshold`` as a :class:`Grouping`.

        Args:
            threshold: at or above the ``stop`` this dendrogram was built down to.
            rank: the ranking that picks each cluster's representative.
            pairs: the pairs it was built from (for the members' scores).

        Raises:
            ValueError: ``threshold`` below ``stop`` (those merges were not made), or bad
                inputs.
        """
        _check_inputs(self.n, pairs, threshold, rank)
        if np.float32(threshold) < np.float32(self.stop):
            raise ValueError(
                f"the dendrogram was built down to {self.stop}; it cannot be cut at {threshold}"
            )
        # Heights are float64 means; a pair's own score is its float32 value, so comparing
        # with the float32 threshold's value agrees with IndexedPairs.above. The merges at or
        # above the threshold are the prefix before the first one below it.
        below = np.flatnonzero(self.height < float(np.float32(threshold)))
        take = int(below[0]) if len(below) else len(self.height)
        labels = _component_labels(self.n, self.left[:take], self.right[:take])
        return _from_labels("average", threshold, labels, rank, pairs)


def average_linkage(
    n: int, pairs: IndexedPairs, stop: float, missing_score: float = 0.0
) -> Dendrogram:
    """Average-linkage merges over the pair graph down to mean score ``stop``.

    Between clusters ``A`` and ``B`` the mean is ``(sum of given scores + missing_score *
    pairs not given) / (|A| |B|)``. Only clusters joined by a given pair are ever compared, so
    ``missing_score`` should not exceed ``stop``: two clusters with no given pair between them
    are never merged. Costs about ``P log P`` for ``P`` pairs: each merge folds the smaller
    cluster's neighbour table into the larger one's and queues only the means that may have
    risen.

    Raises:
        ValueError: ``stop`` outside ``[-1, 1]`` or ``missing_score > stop``.
    """
    _check_threshold(stop)
    if missing_score > stop:
        raise ValueError(
            f"missing_score ({missing_score}) above the stop threshold ({stop}) would merge "
            "clusters that share no pair"
        )
    # A cluster is named by one of its rows. Its neighbour table maps a neighbouring cluster
    # to sum + 1j * count over the given pairs between them: one complex number per entry adds
    # both with one operation.
    tables: dict[int, dict[int, complex]] = {}
    for a, b, s in zip(pairs.a.tolist(), pairs.b.tolist(), pairs.scores.tolist(), strict=True):
        tables.setdefault(a, {})[b] = complex(s, 1)
        tables.setdefault(b, {})[a] = complex(s, 1)
    size = dict.fromkeys(tables, 1)
    limit = float(np.float32(stop))

    def mean(x: int, y: int) -> float:
        value, total = tables[x][y], size[x] * size[y]
        return (value.real + missing_score * (total - value.imag)) / total

    # Heap keys are upper bounds of the current means: when two clusters merge, the means of
    # the neighbours of the smaller one are queued afresh; a neighbour of only the larger one
    # has its mean lowered (more pairs, none of them given), so its old key stays an upper
    # bound and is corrected when it comes to the top.
    heap = [
        (-float(s), a, b)
        for a, b, s in zip(pairs.a.tolist(), pairs.b.tolist(), pairs.scores.tolist(), strict=True)
        if s >= limit
    ]
    heapq.heapify(heap)
    left, right, height = [], [], []
    while heap:
        negative, x, y = heapq.heappop(heap)
        if x not in tables or y not in tables:
            continue  # one side was merged into another cluster since
        current = mean(x, y)
        if current < -negative:
            if current >= limit:
                heapq.heappush(heap, (-current, x, y))
            continue
        left.append(x)
        right.append(y)
        height.append(current)
        big, small = (x, y) if len(tables[x]) >= len(tables[y]) else (y, x)
        table, other = tables[big], tables.pop(small)
        del table[small], other[big]
        size[big] += size.pop(small)
        for z, value in other.items():
            table[z] = table.get(z, 0j) + value
            neighbour = tables[z]
            neighbour[big] = table[z]
            del neighbour[small]
            joined = mean(big, z)
            if joined >= limit:
                heapq.heappush(heap, (-joined, big, z))
    return Dendrogram(
        n=n,
        left=np.array(left, np.int64),
        right=np.array(right, np.int64),
        height=np.array(height, np.float64),
        missing_score=missing_score,
        stop=stop,
    )


# ---------------------------------------------------------------------------- shared parts


def _component_labels(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    graph = coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(n, n)).tocsr()
    return connected_components(graph, directed=False)[1].astype(np.int64)


def _ranked_grouping(
    method: str,
    n: int,
    edges: IndexedPairs,
    threshold: float,
    rank: np.ndarray,
    pairs: IndexedPairs,
    radius: float | None = None,
) -> Grouping:
    """The ranked rule over ``edges``: visit by rank, join the most similar kept better item."""
    both_ends = np.concatenate([edges.a, edges.b])
    others = np.concatenate([edges.b, edges.a])
    scores = np.concatenate([edges.scores, edges.scores])
    order = np.argsort(both_ends, kind="stable")
    starts = np.searchsorted(both_ends[order], np.arange(n + 1))
    visit = np.argsort(rank, kind="stable")
    leader = _ranked_kernel(visit, rank, starts, others[order], scores[order])
    rows = np.arange(n)
    alone = leader < 0
    labels = np.where(alone, rows, leader)
    representative_row = np.where(alone, rows, leader)
    return _from_labels(method, threshold, labels, rank, pairs, representative_row, radius)


@numba.njit(nogil=True, cache=True)
def _ranked_kernel(visit, rank, starts, others, scores):  # pragma: no cover - compiled
    """``leader[i]``: the kept item row ``i`` joins, -1 when ``i`` is kept."""
    n = len(rank)
    leader = np.full(n, -1, np.int64)
    kept = np.zeros(n, np.bool_)
    for i in visit:
        best = -1
        best_score = -np.inf
        for position in range(starts[i], starts[i + 1]):
            j = others[position]
            if rank[j] < rank[i] and kept[j]:
                s = scores[position]
                if s > best_score or (s == best_score and rank[j] < rank[best]):
                    best, best_score = j, s
        if best < 0:
            kept[i] = True
        else:
            leader[i] = best
    return leader


def _from_labels(
    method: str,
    threshold: float,
    labels: np.ndarray,
    rank: np.ndarray,
    pairs: IndexedPairs,
    representative_row: np.ndarray | None = None,
    radius: float | None = None,
) -> Grouping:
    """A :class:`Grouping` from a partition label per row.

    ``representative_row`` gives each row's representative (constant within a label); by
    default the best-ranked row of the label. A removed row is "similar to its representative"
    when their score reaches ``radius`` (default ``threshold``).
    """
    n = len(labels)
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    if representative_row is None:
        best = np.full(len(counts), np.iinfo(np.int64).max)
        np.minimum.at(best, inverse, rank)
        by_rank = np.empty(n, np.int64)
        by_rank[rank] = np.arange(n)
        representative_row = by_rank[best][inverse]
    grouped = counts[inverse] > 1
    group_labels = np.flatnonzero(counts > 1)
    head = np.empty(len(counts), np.int64)
    head[inverse] = representative_row
    # Number groups by size descending, then by their representative's rank.
    by_size = np.lexsort((rank[head[group_labels]], -counts[group_labels]))
    number = np.full(len(counts), -1, np.int64)
    number[group_labels[by_size]] = np.arange(len(group_labels))
    group = number[inverse]
    representative = grouped & (representative_row == np.arange(n))
    removed = grouped & ~representative
    matched = np.where(removed, representative_row, -1)
    matched_score = np.full(n, np.nan, np.float32)
    rows = np.flatnonzero(removed)
    matched_score[rows] = _lookup_scores(pairs, n, rows, matched[rows])
    reason = np.zeros(n, np.int8)
    near = matched_score[rows] >= np.float32(threshold if radius is None else radius)
    reason[rows] = np.where(near, NEAR_REPRESENTATIVE, THROUGH_MEMBERS)
    return Grouping(
        method=method,
        threshold=threshold,
        group=group,
        representative=representative,
        sizes=counts[group_labels[by_size]].astype(np.int64),
        matched=matched,
        matched_score=matched_score,
        reason=reason,
        pairs_used=int(np.sum(pairs.scores >= np.float32(threshold))),
    )


def _lookup_scores(pairs: IndexedPairs, n: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Scores of the pairs ``(x[i], y[i])``; NaN where the pair is not given."""
    key = pairs.a * n + pairs.b
    # Pairs usually come sorted by (a, b) (pairs stage, index_pairs): skip the sort then.
    order = np.arange(len(key)) if np.all(key[1:] >= key[:-1]) else np.argsort(key, kind="stable")
    sorted_key = key[order]
    wanted = np.minimum(x, y) * n + np.maximum(x, y)
    position = np.clip(np.searchsorted(sorted_key, wanted), 0, max(len(key) - 1, 0))
    out = np.full(len(wanted), np.nan, np.float32)
    if len(key):
        found = sorted_key[position] == wanted
        out[found] = pairs.scores[order[position[found]]]
    return out


def _check_threshold(threshold: float) -> None:
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must lie in [-1, 1], got {threshold}")


def _check_inputs(n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray) -> None:
    _check_threshold(threshold)
    rank = np.asarray(rank)
    permutation = (
        rank.shape == (n,)
        and np.issubdtype(rank.dtype, np.integer)
        and (n == 0 or (rank.min() >= 0 and rank.max() < n))
        and bool(np.all(np.bincount(rank, minlength=n) == 1))
    )
    if not permutation:
        raise ValueError(f"rank must be a permutation of 0 .. {n - 1} (see rank_items)")
    if len(pairs) and (pairs.a.min() < 0 or pairs.b.max() >= n or np.any(pairs.a >= pairs.b)):
        raise ValueError(f"pairs must be rows a < b in [0, {n})")
