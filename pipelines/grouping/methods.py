"""Duplicate groups by several methods, from similar pairs and a ranking (Beam-free).

Items are the rows ``0 .. n-1``; pairs are :class:`sbert_pipeline.grouping.pairs.IndexedPairs`
(``a < b``, float32 scores, each pair once), typically every pair at or above a low floor.
Scores and thresholds are compared in float32, as the pairs stage compares them.

A *ranking* (:func:`sbert_pipeline.grouping.ranking.rank_items`) orders the items by
preference: rank 0 is kept first. Every method returns a
:class:`sbert_pipeline.grouping.model.Grouping`: a group number per item (-1 for an item in no
group), one representative per group (the kept member), and for every removed member the row it
was matched to (its representative), that pair's score and a reason.

Every method is one entry of :data:`METHOD_TABLE`, called through :func:`group_items`
(``threshold`` is ``T``):

* ``components``: the connected components of the pairs ``>= T``, representative the
  best-ranked member, groups numbered by their first member in the order rank; a removed
  member's score is its pair with the representative only when that pair is ``>= T`` (else a
  chained member). On real question corpora it chains (A ~ B ~ C ~ ... puts distinct questions
  in one giant group).
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
  higher threshold as a prefix of the merges (:mod:`sbert_pipeline.grouping.linkage`).

Example:
    >>> rank = rank_items("central", n, pairs=pairs, threshold=0.8)
    >>> groups = group_items("star", n, pairs, 0.8, rank, rep_threshold=0.75)
    >>> groups.kept.sum() + groups.n_removed == n
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.grouping.adjacency import PairGraph, ranked_leaders
from sbert_pipeline.grouping.choices import KEEP_POLICIES, METHODS, Method
from sbert_pipeline.grouping.limit import limit_group_size
from sbert_pipeline.grouping.linkage import average_linkage
from sbert_pipeline.grouping.model import (
    KEPT,
    NEAR_REPRESENTATIVE,
    THROUGH_MEMBERS,
    Grouping,
    grouping_from_labels,
)
from sbert_pipeline.grouping.pairs import IndexedPairs, check_grouping_inputs, lookup_scores
from sbert_pipeline.grouping.ranking import rank_items
from sbert_pipeline.vectors.progress import Progress, stage_progress

from sbert_core.graph import component_labels, smallest_node_labels

# The methods that walk each row's pairs (grouping/adjacency.py).
GRAPH_METHODS = ("ranked", "star", "mutual")


@dataclass(frozen=True)
class MethodParams:
    """What a method needs besides the pairs, the threshold and the ranking.

    Attributes:
        radius: star, split: the least score of a member with its representative (None: the
            threshold).
        k: mutual: neighbours per item.
        missing_score: average: the score of a pair that is not given.
        order_rank: components: the order that numbers equal-size groups and breaks ties
            (None: the ranking).
        graph: ranked, star, mutual: the pairs' :class:`PairGraph`, when the caller groups the
            same pairs at several thresholds (made here otherwise).
    """

    radius: float | None = None
    k: int = 5
    missing_score: float = 0.0
    order_rank: np.ndarray | None = None
    graph: PairGraph | None = None


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
    graph: PairGraph | None = None,
    order_rank: np.ndarray | None = None,
    max_group_size: int | None = None,
) -> Grouping:
    """Duplicate groups of ``n`` items at ``threshold`` by ``method`` (module docstring).

    Args:
        method: one of :data:`METHODS`.
        n: number of items.
        pairs: unique pairs over the rows; only ``average`` reads pairs below ``threshold``.
        threshold: cosine threshold, in ``[-1, 1]``.
        rank: ``(n,)`` distinct ranks (:func:`sbert_pipeline.grouping.ranking.rank_items`); the
            best-ranked member of a group is its representative.
        rep_threshold, k, missing_score, graph, order_rank: :class:`MethodParams`.
        max_group_size: a group over this many members is split
            (:func:`sbert_pipeline.grouping.limit.limit_group_size`; None: no limit).

    Raises:
        ValueError: an unknown method, a bad threshold, rank, ``rep_threshold``, ``k`` or
            ``max_group_size``.
    """
    if method not in METHOD_TABLE:
        raise ValueError(f"unknown dedup method {method!r}; choose one of {', '.join(METHODS)}")
    check_grouping_inputs(n, pairs, threshold, rank)
    params = MethodParams(rep_threshold, k, missing_score, order_rank, graph)
    grouping = METHOD_TABLE[method](n, pairs, threshold, rank, params)
    return limit_group_size(grouping, pairs, rank, max_group_size, graph)


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
    progress: Progress | None = None,
    max_group_size: int | None = None,
) -> Iterator[Grouping]:
    """:func:`group_items` at every threshold, in the order given.

    ``average`` builds one dendrogram down to the lowest threshold and cuts it at each.

    Args:
        rank_at: the ranking to use at a threshold (``central`` depends on it).
        rep_threshold: ``star``, ``split``: the radius at a threshold (default: the threshold).
        k, missing_score, max_group_size: as for :func:`group_items`.
        progress: the bar to count each threshold on (:func:`sbert_pipeline.grouping.compare.
            sweep_methods` counts every method on one); default: a bar of this method's own.
    """
    bar = progress
    if bar is None:
        bar = stage_progress(f"dedup sweep ({method})", total=len(thresholds), unit="thresholds")
    bar.start()  # counted as the caller takes the next grouping; closed at the total
    # Sorted once for every threshold (grouping/adjacency.py); the size limit walks it too, and
    # makes it for the other methods only at a threshold with a group over the limit.
    graph = PairGraph(n, pairs) if method in GRAPH_METHODS and len(thresholds) else None
    if method == "average" and len(thresholds):
        tree = average_linkage(n, pairs, min(thresholds), missing_score)
        for threshold in thresholds:
            rank = rank_at(threshold)
            cut = tree.cut(threshold, rank, pairs)
            yield limit_group_size(cut, pairs, rank, max_group_size, graph)
            bar.update()
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
            graph=graph,
            max_group_size=max_group_size,
        )
        bar.update()


def components_by_keep(
    n: int,
    pairs: IndexedPairs,
    threshold: float,
    keep: str = "first",
    *,
    order_rank: np.ndarray | None = None,
    text_lengths: np.ndarray | None = None,
    preference: np.ndarray | None = None,
) -> Grouping:
    """The ``components`` groups keeping the member a keep policy ranks first.

    Args:
        keep: ``first``, ``longest`` or ``central`` (ranked here), or the name of the ranking
            given as ``preference`` (``random``, ``column:NAME``).
        order_rank: ``(n,)`` distinct integers, the order that decides ``first`` and every tie
            (default: row order).
        text_lengths: ``(n,)`` characters per text, negative where unknown (``longest``).
        preference: ``(n,)`` distinct ranks of another policy, 0 the most preferred.

    Raises:
        ValueError: a policy other than :data:`KEEP_POLICIES` without ``preference``, or
            ``longest`` without the length of a grouped item.
    """
    if keep not in KEEP_POLICIES and preference is None:
        raise ValueError(
            f"unknown keep policy {keep!r}; choose one of {', '.join(KEEP_POLICIES)}, or "
            "give the ranking of another (preference)"
        )
    order = np.arange(n, dtype=np.int64) if order_rank is None else np.asarray(order_rank, np.int64)
    if keep == "longest":
        _check_lengths(n, pairs.above(threshold), text_lengths)
    if keep in KEEP_POLICIES:
        preference = rank_items(
            keep,  # type: ignore[arg-type]
            n,
            order_rank=order,
            text_lengths=text_lengths,
            pairs=pairs,
            threshold=threshold,
        )
    return group_items("components", n, pairs, threshold, preference, order_rank=order)


def _check_lengths(n: int, used: IndexedPairs, text_lengths: np.ndarray | None) -> None:
    """Refuse ``longest`` without the text length of every grouped item."""
    grouped = np.zeros(n, bool)
    grouped[used.a] = grouped[used.b] = True
    lengths = None if text_lengths is None else np.asarray(text_lengths, np.int64)
    unknown = int(grouped.sum()) if lengths is None else int(np.sum(grouped & (lengths < 0)))
    if unknown:
        raise ValueError(
            f"the longest keep policy needs the texts of all grouped items; {unknown} of "
            f"{int(grouped.sum())} are unknown"
        )


def components(
    n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray, params: MethodParams
) -> Grouping:
    """Connected components of the pairs ``>= threshold``; representative the best-ranked.

    Groups are numbered by size descending, equal sizes by their first member in the order
    rank; a removed member's score is its pair with the representative when that pair is
    ``>= threshold``, else NaN (a chained member).
    """
    order = rank if params.order_rank is None else np.asarray(params.order_rank, np.int64)
    used = pairs.above(threshold)
    roots = smallest_node_labels(n, used.a, used.b)
    component_size = np.bincount(roots, minlength=n)
    grouped = np.flatnonzero(component_size[roots] > 1)
    group, sizes = _numbered(n, roots, component_size, grouped, order)
    ranked = grouped[np.lexsort((order[grouped], np.asarray(rank)[grouped], group[grouped]))]
    representative = np.zeros(n, bool)
    if len(ranked):
        starts = np.ones(len(ranked), bool)
        starts[1:] = group[ranked][1:] != group[ranked][:-1]
        representative[ranked[starts]] = True
    matched, matched_score = _matches(group, representative, used)
    removed = matched >= 0
    reason = np.full(n, KEPT, np.int8)
    reason[removed] = np.where(
        np.isnan(matched_score[removed]), THROUGH_MEMBERS, NEAR_REPRESENTATIVE
    )
    return Grouping(
        method="components",
        threshold=threshold,
        group=group,
        representative=representative,
        sizes=sizes,
        matched=matched,
        matched_score=matched_score,
        reason=reason,
        pairs_used=len(used),
    )


def _numbered(
    n: int, roots: np.ndarray, component_size: np.ndarray, grouped: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` group numbers (-1: no group) by size descending, then by the first member in
    ``order``, and ``(G,)`` the sizes."""
    group_roots, inverse = np.unique(roots[grouped], return_inverse=True)
    first_rank = np.full(len(group_roots), np.iinfo(np.int64).max)
    np.minimum.at(first_rank, inverse, order[grouped])
    by_size = np.lexsort((first_rank, -component_size[group_roots]))
    number = np.empty(len(group_roots), np.int64)
    number[by_size] = np.arange(len(group_roots))
    group = np.full(n, -1, np.int64)
    group[grouped] = number[inverse]
    return group, component_size[group_roots][by_size].astype(np.int64)


def _matches(
    group: np.ndarray, representative: np.ndarray, used: IndexedPairs
) -> tuple[np.ndarray, np.ndarray]:
    """``(n,)`` each removed member's representative row (-1: kept) and their pair's score
    where that pair is among ``used`` (NaN otherwise: a chained member, or kept)."""
    n = len(group)
    heads = np.full(int(group.max()) + 1 if n and group.max() >= 0 else 0, -1, np.int64)
    rows = np.flatnonzero(representative)
    heads[group[rows]] = rows
    removed = (group >= 0) & ~representative
    matched = np.where(removed, heads[np.maximum(group, 0)] if len(heads) else -1, -1)
    score = np.full(n, np.nan, np.float32)
    # Every pair at or above the threshold lies inside one group, by construction.
    a_is_rep, b_is_rep = representative[used.a], representative[used.b]
    score[used.b[a_is_rep]] = used.scores[a_is_rep]
    score[used.a[b_is_rep]] = used.scores[b_is_rep]
    return matched.astype(np.int64), score


def ranked(
    n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray, params: MethodParams
) -> Grouping:
    """SemDeDup's rule: remove an item ``>= threshold`` to a kept better-ranked item."""
    leader = ranked_leaders(params.graph or PairGraph(n, pairs), rank, threshold)
    return _leader_grouping("ranked", leader, threshold, rank, pairs)


def star(
    n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray, params: MethodParams
) -> Grouping:
    """Components at ``threshold``, each split by the ranked rule at the radius."""
    radius = _radius(threshold, params)
    used = pairs.above(threshold)
    component = component_labels(n, used.a, used.b)
    del used
    # The ranked rule over the pairs >= the radius inside one component.
    leader = ranked_leaders(params.graph or PairGraph(n, pairs), rank, radius, component)
    return _leader_grouping("star", leader, threshold, rank, pairs, radius)


def _radius(threshold: float, params: MethodParams) -> float:
    """The radius of star and split, checked."""
    radius = threshold if params.radius is None else params.radius
    if not -1.0 <= radius <= threshold:
        raise ValueError(f"rep_threshold must lie in [-1, threshold={threshold}], got {radius}")
    return radius


def split(
    n: int,
    pairs: IndexedPairs,
    threshold: float,
    rank: np.ndarray,
    params: MethodParams,
    step: float = 0.01,
) -> Grouping:
    """Components at ``threshold``; a component with a member ``< rep_threshold`` to its
    best-ranked member (or without a given pair to it) is split into its components at
    ``threshold + step``, and so on, until every group passes.

    So a group is a component of the pairs at some level ``>= threshold`` within its parent,
    and every member is ``>= rep_threshold`` to the representative: tight components stay
    whole, chains are cut at their weakest links, never into loose stars.
    """
    rep_threshold = _radius(threshold, params)
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
        labels = component_labels(n, used.a[edge], used.b[edge])
        rows = np.flatnonzero(active)
        _, inverse = np.unique(labels[rows], return_inverse=True)
        inverse = inverse.reshape(-1)
        best = np.full(inverse.max() + 1, np.iinfo(np.int64).max)
        np.minimum.at(best, inverse, rank[rows])
        head = by_rank[best][inverse]
        near = (rows == head) | (lookup_scores(pairs, n, rows, head) >= np.float32(rep_threshold))
        passes = np.ones(len(best), bool)
        np.logical_and.at(passes, inverse, near)
        # Without edges every component is one item and passes, so the loop ends.
        settled = passes[inverse] | (not edge.any())
        final[rows[settled]] = next_label + inverse[settled]
        next_label += len(best)
        active[rows[settled]] = False
        level = round(level + step, 6)
    return grouping_from_labels("split", threshold, final, rank, pairs, radius=rep_threshold)


def mutual(
    n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray, params: MethodParams
) -> Grouping:
    """Components over the pairs ``>= threshold`` whose ends are each in the other's top ``k``.

    A neighbour's place in an item's list is by score descending, then row ascending (as
    :func:`sbert_pipeline.vectors.allpairs.self_topk` orders them). Every neighbour that precedes a
    pair ``>= threshold`` in a list is itself ``>= threshold``, so the places are exact whenever the
    pairs hold every pair ``>= threshold`` (and the same among all the pairs as among those
    ``>= threshold``: :class:`sbert_pipeline.grouping.adjacency.PairGraph` computes them once).
    """
    k = params.k
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    place_ab, place_ba = (params.graph or PairGraph(n, pairs)).places
    mutual_edge = (pairs.scores >= np.float32(threshold)) & (place_ab < k) & (place_ba < k)
    labels = component_labels(n, pairs.a[mutual_edge], pairs.b[mutual_edge])
    return grouping_from_labels("mutual", threshold, labels, rank, pairs)


def average(
    n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray, params: MethodParams
) -> Grouping:
    """Average-linkage clusters merged while the mean score is ``>= threshold``."""
    return average_linkage(n, pairs, threshold, params.missing_score).cut(threshold, rank, pairs)


def _leader_grouping(
    method: str,
    leader: np.ndarray,
    threshold: float,
    rank: np.ndarray,
    pairs: IndexedPairs,
    radius: float | None = None,
) -> Grouping:
    """The grouping of the ranked rule: every row with the kept row it joined (``leader``,
    -1: kept), which is its group's label and its representative."""
    rows = np.arange(len(leader))
    representative_row = np.where(leader < 0, rows, leader)
    return grouping_from_labels(
        method, threshold, representative_row, rank, pairs, representative_row, radius
    )


# The one dispatch table: every method by name, all with one signature.
METHOD_TABLE: dict[str, Callable[..., Grouping]] = {
    "components": components,
    "ranked": ranked,
    "star": star,
    "split": split,
    "mutual": mutual,
    "average": average,
}
