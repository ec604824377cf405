"""Duplicate groups by several methods, from similar pairs and a ranking (Beam-free).

Items are the rows ``0 .. n-1``; pairs are :class:`sbert_pipeline.dedup.groups.IndexedPairs` (``a <
b``, float32 scores, each pair once), typically every pair at or above a low floor (e.g. 0.70).
Scores and thresholds are compared in float32, as the pairs stage compares them.

A *ranking* (:func:`sbert_pipeline.dedup.ranking.rank_items`) orders the items by preference: rank 0
is kept first. Every method returns a :class:`sbert_pipeline.dedup.grouping.Grouping`: a group
number per item (-1 for an item in no group), one representative per group (the kept member),
and for every removed member the row it was matched to (its representative), that pair's
score and a reason.

Methods (``threshold`` is ``T``):

* ``components``: the connected components of the pairs ``>= T``, representative the
  best-ranked member. This is what :func:`sbert_pipeline.dedup.groups.deduplicate` computes; on real
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
  higher threshold as a prefix of the merges (:mod:`sbert_pipeline.dedup.linkage`).

Example:
    >>> rank = rank_items("central", n, pairs=pairs, threshold=0.8)
    >>> groups = group_items("star", n, pairs, 0.8, rank, rep_threshold=0.75)
    >>> groups.kept.sum() + groups.n_removed == n
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from sbert_pipeline.dedup.adjacency import PairGraph, ranked_leaders
from sbert_pipeline.dedup.choices import METHODS, Method
from sbert_pipeline.dedup.grouping import (
    Grouping,
    check_inputs,
    from_labels,
    lookup_scores,
)
from sbert_pipeline.dedup.groups import IndexedPairs
from sbert_pipeline.dedup.linkage import average_linkage
from sbert_pipeline.vectors.components import component_labels
from sbert_pipeline.vectors.progress import Progress, stage_progress

# The methods that walk each row's pairs (pipelines/dedup/adjacency.py).
GRAPH_METHODS = ("ranked", "star", "mutual")


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
) -> Grouping:
    """Duplicate groups of ``n`` items at ``threshold`` by ``method`` (module docstring).

    Args:
        method: one of :data:`METHODS`.
        n: number of items.
        pairs: unique pairs over the rows; only ``average`` reads pairs below ``threshold``.
        threshold: cosine threshold, in ``[-1, 1]``.
        rank: ``(n,)`` distinct ranks (:func:`sbert_pipeline.dedup.ranking.rank_items`); the
            best-ranked member of a group is its representative.
        rep_threshold: ``star``, ``split``: the radius around a representative (default
            ``threshold``).
        k: ``mutual``: neighbours per item.
        missing_score: ``average``: the score of a pair that is not given.
        graph: ``ranked``, ``star``, ``mutual``: the pairs' :class:`PairGraph`, when the
            caller groups the same pairs at several thresholds (made here otherwise).

    Raises:
        ValueError: an unknown method, a bad threshold, rank, ``rep_threshold`` or ``k``.
    """
    check_inputs(n, pairs, threshold, rank)
    if method == "components":
        return component_groups(n, pairs, threshold, rank)
    if method == "ranked":
        return ranked(n, pairs, threshold, rank, graph)
    if method == "star":
        radius = threshold if rep_threshold is None else rep_threshold
        return star(n, pairs, threshold, rank, radius, graph)
    if method == "split":
        radius = threshold if rep_threshold is None else rep_threshold
        return split(n, pairs, threshold, rank, radius)
    if method == "mutual":
        return mutual(n, pairs, threshold, rank, k, graph)
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
    progress: Progress | None = None,
) -> Iterator[Grouping]:
    """:func:`group_items` at every threshold, in the order given.

    ``average`` builds one dendrogram down to the lowest threshold and cuts it at each.

    Args:
        rank_at: the ranking to use at a threshold (``central`` depends on it).
        rep_threshold: ``star``, ``split``: the radius at a threshold (default: the threshold).
        k, missing_score: as for :func:`group_items`.
        progress: the bar to count each threshold on (:func:`sbert_pipeline.dedup.sweep.
            sweep_methods` counts every method on one); default: a bar of this method's own.
    """
    bar = progress
    if bar is None:
        bar = stage_progress(f"dedup sweep ({method})", total=len(thresholds), unit="thresholds")
    bar.start()  # counted as the caller takes the next grouping; closed at the total
    if method == "average" and len(thresholds):
        tree = average_linkage(n, pairs, min(thresholds), missing_score)
        for threshold in thresholds:
            yield tree.cut(threshold, rank_at(threshold), pairs)
            bar.update()
        return
    # Sorted once for every threshold (pipelines/dedup/adjacency.py).
    graph = PairGraph(n, pairs) if method in GRAPH_METHODS and len(thresholds) else None
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
        )
        bar.update()


def component_groups(n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray) -> Grouping:
    """Connected components of the pairs ``>= threshold``; representative the best-ranked."""
    check_inputs(n, pairs, threshold, rank)
    used = pairs.above(threshold)
    return from_labels("components", threshold, component_labels(n, used.a, used.b), rank, pairs)


def ranked(
    n: int,
    pairs: IndexedPairs,
    threshold: float,
    rank: np.ndarray,
    graph: PairGraph | None = None,
) -> Grouping:
    """SemDeDup's rule: remove an item ``>= threshold`` to a kept better-ranked item."""
    check_inputs(n, pairs, threshold, rank)
    leader = ranked_leaders(graph or PairGraph(n, pairs), rank, threshold)
    return _leader_grouping("ranked", leader, threshold, rank, pairs)


def star(
    n: int,
    pairs: IndexedPairs,
    threshold: float,
    rank: np.ndarray,
    rep_threshold: float,
    graph: PairGraph | None = None,
) -> Grouping:
    """Components at ``threshold``, each split by the ranked rule at ``rep_threshold``."""
    check_inputs(n, pairs, threshold, rank)
    if not -1.0 <= rep_threshold <= threshold:
        raise ValueError(
            f"rep_threshold must lie in [-1, threshold={threshold}], got {rep_threshold}"
        )
    used = pairs.above(threshold)
    component = component_labels(n, used.a, used.b)
    del used
    # The ranked rule over the pairs >= the radius inside one component.
    leader = ranked_leaders(graph or PairGraph(n, pairs), rank, rep_threshold, component)
    return _leader_grouping("star", leader, threshold, rank, pairs, rep_threshold)


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
    check_inputs(n, pairs, threshold, rank)
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
    return from_labels("split", threshold, final, rank, pairs, radius=rep_threshold)


def mutual(
    n: int,
    pairs: IndexedPairs,
    threshold: float,
    rank: np.ndarray,
    k: int,
    graph: PairGraph | None = None,
) -> Grouping:
    """Components over the pairs ``>= threshold`` whose ends are each in the other's top ``k``.

    A neighbour's place in an item's list is by score descending, then row ascending (as
    :func:`sbert_pipeline.vectors.allpairs.self_topk` orders them). Every neighbour that precedes a
    pair ``>= threshold`` in a list is itself ``>= threshold``, so the places are exact whenever the
    pairs hold every pair ``>= threshold`` (and the same among all the pairs as among those
    ``>= threshold``: :class:`sbert_pipeline.dedup.adjacency.PairGraph` computes them once).
    """
    check_inputs(n, pairs, threshold, rank)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    place_ab, place_ba = (graph or PairGraph(n, pairs)).places
    mutual_edge = (pairs.scores >= np.float32(threshold)) & (place_ab < k) & (place_ba < k)
    labels = component_labels(n, pairs.a[mutual_edge], pairs.b[mutual_edge])
    return from_labels("mutual", threshold, labels, rank, pairs)


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
    return from_labels(
        method, threshold, representative_row, rank, pairs, representative_row, radius
    )
