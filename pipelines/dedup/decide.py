"""The decide phase of a dedup run: the method's groups with the reference rows added and the
pinned rows kept (Beam-free).

:func:`decide` joins what :mod:`sbert_pipeline.dedup.against` (reference rows, pinned) and
:mod:`sbert_pipeline.dedup.versions` (rows the previous version kept, pinned by the stable keep)
add to the method's grouping (:func:`decide_groups`, :func:`pin`, :func:`merge_groups`), and
gives the groups their stable ids and says what changed. A previously kept row that matches a
reference row is not pinned: the reference wins, so decontamination holds.

Pinned rows are rows a run must keep whatever the keep rule says. The method groups the rows as
usual; then every group that holds pinned rows is split around them (:func:`pin`): every pinned
row is kept; every other member joins the pinned row of its group it is most similar to (the
highest score of a loaded pair at or above the radius, ties to the better-ranked pinned row). A
member with no such pair is kept when the method removes rows only at or above the threshold
to their kept row (star, split, ranked at their default radius), so pins never break that rule;
with the other methods it joins the best-ranked pinned row, with no score ("chained"). A pinned
row nobody joined is in no group. :func:`merge_groups` first joins groups linked by the corpus x
reference pairs, so a corpus group that holds a row matching a reference row is removed with
it (with a tight method: the members at or above the radius to a reference row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from sbert_pipeline.dedup.against import Reference
from sbert_pipeline.dedup.inputs import DedupInputs
from sbert_pipeline.dedup.versions import changes, pinned_rows, stable_group_ids
from sbert_pipeline.grouping.compare import MethodSweep
from sbert_pipeline.grouping.item_ids import ItemIds
from sbert_pipeline.grouping.model import KEPT, NEAR_REPRESENTATIVE, THROUGH_MEMBERS, Grouping
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.io.texts import texts_from_embeddings

from sbert_core.graph import smallest_node_labels

REFERENCE_MARK = " (reference)"  # after a reference id in the report


@dataclass(frozen=True)
class Decisions:
    """The final grouping over the corpus rows ``0 .. n-1`` and the reference rows after them.

    ``rank`` orders them all (reference rows last); ``pinned`` flags the rows kept whatever
    the keep rule (reference rows and the previous kept rows).
    """

    grouping: Grouping
    rank: np.ndarray
    pairs: IndexedPairs
    pinned: np.ndarray
    n: int  # corpus rows

    @property
    def corpus_kept(self) -> np.ndarray:
        """``(n,)`` bool: the corpus rows kept (what ``kept_ids.txt`` lists)."""
        return self.grouping.kept[: self.n]

    def reference_column(self) -> np.ndarray:
        """``(rows,)`` bool: the reference rows."""
        out = np.zeros(self.grouping.n, bool)
        out[self.n :] = True
        return out


def decide_groups(
    grouping: Grouping,
    rank: np.ndarray,
    pairs: IndexedPairs,
    radius: float,
    previous_kept: np.ndarray,
    reference: Reference | None,
    chain: bool = False,
) -> Decisions:
    """The method's ``grouping`` of the corpus with the reference rows and the pins applied.

    Args:
        grouping: the chosen method's groups over the ``n`` corpus rows.
        rank: ``(n,)`` the corpus order rank (ties, and which pinned row a chained member
            joins).
        pairs: the loaded corpus pairs.
        radius: the least score by which a member joins a pinned row (the threshold, or the
            star/split radius).
        previous_kept: ``(n,)`` bool, the corpus rows to pin (the previous version kept them).
        reference: the reference corpus and its pairs with the corpus, if any.
        chain: whether a member with no pair at or above the radius to a pinned row of its
            group joins one anyway (a method that chains); else it is kept.
    """
    n = grouping.n
    pinned = np.asarray(previous_kept, bool).copy()
    if reference is not None:
        m = reference.m
        pinned &= ~reference.matched  # a kept row that duplicates a reference row goes
        pinned = np.concatenate([pinned, np.ones(m, bool)])
        rank = np.concatenate([np.asarray(rank, np.int64), n + np.arange(m, dtype=np.int64)])
        pairs = IndexedPairs(
            np.concatenate([pairs.a, reference.pairs.a]),
            np.concatenate([pairs.b, reference.pairs.b]),
            np.concatenate([pairs.scores, reference.pairs.scores]),
        )
        grouping = merge_groups(extend(grouping, n + m), reference.pairs, rank)
    final = pin(grouping, pinned, rank, pairs, radius, chain)
    return Decisions(final, np.asarray(rank, np.int64), pairs, pinned, n)


def shown_ids(ids: pa.Array, reference: Reference | None) -> tuple[pa.Array, Sequence[str]]:
    """Every row's id (corpus, then reference) and its id as the report shows it (a
    reference row marked)."""
    if reference is None:
        return ids, ItemIds(ids)
    corpus = ids.to_pylist()
    every = pa.array(corpus + reference.ids, pa.string())
    return every, corpus + [item + REFERENCE_MARK for item in reference.ids]


def reference_texts(reference: Reference, decided: Decisions, shown: list[str]) -> dict:
    """``{shown id: text}`` of the grouped reference rows, from reference embeddings written
    with ``--keep-text`` (none without)."""
    with_text = [dataset for dataset in reference.datasets if dataset.has_text]
    rows = np.flatnonzero(decided.grouping.group[decided.n :] >= 0).tolist()
    if not with_text or not rows:
        return {}
    found = texts_from_embeddings(with_text, {reference.ids[row] for row in rows})
    return {
        shown[decided.n + row]: found[reference.ids[row]]
        for row in rows
        if reference.ids[row] in found
    }


def extend(grouping: Grouping, n: int) -> Grouping:
    """``grouping`` over ``n >= grouping.n`` rows, the added rows in no group (kept)."""
    extra = n - grouping.n
    if extra < 0:
        raise ValueError(f"cannot extend a grouping of {grouping.n} rows to {n}")
    if not extra:
        return grouping
    return dataclasses.replace(
        grouping,
        group=np.concatenate([grouping.group, np.full(extra, -1, np.int64)]),
        representative=np.concatenate([grouping.representative, np.zeros(extra, bool)]),
        matched=np.concatenate([grouping.matched, np.full(extra, -1, np.int64)]),
        matched_score=np.concatenate([grouping.matched_score, np.full(extra, np.nan, np.float32)]),
        reason=np.concatenate([grouping.reason, np.full(extra, KEPT, np.int8)]),
    )


def merge_groups(grouping: Grouping, links: IndexedPairs, rank: np.ndarray) -> Grouping:
    """``grouping`` with the groups (and ungrouped rows) that ``links`` join merged into one.

    The merged groups keep no meaningful representative: call :func:`pin` next with a pinned
    row in each of them (every link has a pinned end). Groups no link touches are unchanged.
    """
    if not len(links):
        return grouping
    n = grouping.n
    heads = np.arange(n)
    grouped = np.flatnonzero(grouping.group >= 0)
    heads[grouped] = grouping.representatives()[grouping.group[grouped]]
    # Each member is joined to its representative, so a group stays connected, then the links.
    rows = np.flatnonzero(heads != np.arange(n))
    edges = IndexedPairs(
        np.concatenate([np.minimum(heads[rows], rows), links.a]),
        np.concatenate([np.maximum(heads[rows], rows), links.b]),
        np.concatenate([np.ones(len(rows), np.float32), links.scores]),
    )
    roots = smallest_node_labels(n, edges.a, edges.b)
    touched = np.zeros(n, bool)
    touched[roots[np.concatenate([links.a, links.b])]] = True
    size = np.bincount(roots, minlength=n)
    merged = touched[roots] & (size[roots] > 1)
    # Old groups keep their numbers; each merged component gets a new one above them.
    _, inverse = np.unique(roots[merged], return_inverse=True)
    group = grouping.group.copy()
    group[merged] = grouping.n_groups + inverse.reshape(-1)
    return _renumbered(grouping, group, grouping.representative & ~merged, rank)


def pin(
    grouping: Grouping,
    pinned: np.ndarray,
    rank: np.ndarray,
    pairs: IndexedPairs,
    radius: float,
    chain: bool = True,
) -> Grouping:
    """``grouping`` with every pinned row kept and every group that holds one split around
    its pinned rows (module docstring).

    Args:
        grouping: the method's groups (after :func:`merge_groups` when there are links).
        pinned: ``(n,)`` bool, the rows that must be kept.
        rank: ``(n,)`` distinct ints, the keep order (0 first) that breaks ties.
        pairs: the loaded pairs (a member joins a pinned row by their pair's score).
        radius: the least score of a pair a member joins a pinned row by.
        chain: whether a member with no such pair joins its group's best-ranked pinned row
            (chained); else it is kept, in no group.
    """
    n = grouping.n
    pinned = np.asarray(pinned, bool)
    if pinned.shape != (n,):
        raise ValueError(f"pinned must hold one flag per row ({n}), got {pinned.shape}")
    rank = np.asarray(rank, np.int64)
    touched_groups = np.unique(grouping.group[pinned & (grouping.group >= 0)])
    if not len(touched_groups):
        return grouping
    touched = np.isin(grouping.group, touched_groups)
    big = np.iinfo(np.int64).max

    # The best-ranked pinned row of each touched group: where a member with no pair goes.
    anchor_rows = np.flatnonzero(touched & pinned)
    best_rank = np.full(grouping.n_groups, big)
    np.minimum.at(best_rank, grouping.group[anchor_rows], rank[anchor_rows])
    by_rank = np.empty(n, np.int64)
    by_rank[rank] = np.arange(n)

    others = touched & ~pinned
    head = np.where(touched & pinned, np.arange(n), -1)
    score = np.full(n, np.nan, np.float32)
    rows = np.flatnonzero(others)
    head[rows] = by_rank[best_rank[grouping.group[rows]]]

    # Pairs (member, pinned row of the same group) at or above the radius, best first.
    near = pairs.above(radius)
    x = np.concatenate([near.a, near.b])
    y = np.concatenate([near.b, near.a])
    s = np.concatenate([near.scores, near.scores])
    keep = others[x] & pinned[y] & (grouping.group[x] == grouping.group[y])
    x, y, s = x[keep], y[keep], s[keep]
    if len(x):
        order = np.lexsort((rank[y], -s, x))
        x, y, s = x[order], y[order], s[order]
        first = np.ones(len(x), bool)
        first[1:] = x[1:] != x[:-1]
        head[x[first]] = y[first]
        score[x[first]] = s[first]

    # Without a pair near a pinned row a member stays only where the method chains anyway.
    strays = others & np.isnan(score) & (not chain)
    others = others & ~strays
    rows = np.flatnonzero(others)
    members = np.bincount(head[rows], minlength=n) if len(rows) else np.zeros(n, np.int64)
    group = grouping.group.copy()
    representative = grouping.representative.copy()
    # Touched rows get provisional numbers above the old ones: their pinned row's.
    group[touched] = grouping.n_groups + head[touched]
    lonely = touched & pinned & (members == 0)
    group[lonely | strays] = -1
    representative[touched] = pinned[touched] & (members[np.maximum(head[touched], 0)] > 0)
    pinned_grouping = dataclasses.replace(
        grouping,
        matched=np.where(others, head, np.where(touched, -1, grouping.matched)),
        matched_score=np.where(
            others, score, np.where(touched, np.nan, grouping.matched_score)
        ).astype(np.float32),
        reason=np.where(
            others,
            np.where(np.isnan(score), THROUGH_MEMBERS, NEAR_REPRESENTATIVE),
            np.where(touched, KEPT, grouping.reason),
        ).astype(np.int8),
    )
    return _renumbered(pinned_grouping, group, representative, rank)


def _renumbered(
    grouping: Grouping, group: np.ndarray, representative: np.ndarray, rank: np.ndarray
) -> Grouping:
    """``grouping`` with new group labels (any ints, -1: no group) numbered ``0 .. G-1`` by
    size descending, then by their representative's (else first member's) rank."""
    n = grouping.n
    grouped = np.flatnonzero(group >= 0)
    labels, inverse, counts = np.unique(group[grouped], return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    big = np.iinfo(np.int64).max
    lead = np.full(len(labels), big)
    np.minimum.at(lead, inverse, np.where(representative[grouped], rank[grouped], big))
    first = np.full(len(labels), big)
    np.minimum.at(first, inverse, rank[grouped])
    lead = np.where(lead == big, first, lead)
    order = np.lexsort((lead, -counts))
    number = np.empty(len(labels), np.int64)
    number[order] = np.arange(len(labels))
    out = np.full(n, -1, np.int64)
    out[grouped] = number[inverse]
    # Ungrouped rows have no representative, no match and are kept.
    alone = out < 0
    return dataclasses.replace(
        grouping,
        group=out,
        representative=representative & ~alone,
        sizes=counts[order].astype(np.int64),
        matched=np.where(alone, -1, grouping.matched),
        matched_score=np.where(alone, np.nan, grouping.matched_score).astype(np.float32),
        reason=np.where(alone, KEPT, grouping.reason).astype(np.int8),
    )


@dataclass(frozen=True)
class Grouped:
    """The chosen method's groups at the threshold and every swept method's counts."""

    groups: Grouping  # with the exact copies joined
    sweeps: list[MethodSweep]  # the chosen method first
    radius: float | None  # star, split: the radius at the threshold
    # Whether every removed row is at or above the threshold to its kept row (the method's
    # rule at its radius); else the method may remove rows below it (an explicit choice).
    holds_threshold: bool = True


@dataclass(frozen=True)
class Decided:
    """The final decisions and what the writers show of them."""

    decisions: Decisions
    every_id: pa.Array  # corpus ids, then reference ids: as groups.parquet lists them
    shown: Sequence[str]  # every id as the report shows it (a reference row marked)
    all_ids: ItemIds
    texts: dict[str, str]
    group_ids: np.ndarray  # (G,) each group's published id (stable across versions)
    changes: dict | None  # what changed since the previous version (None: none)

    @property
    def grouping(self) -> Grouping:
        """The final grouping (corpus rows, then reference rows)."""
        return self.decisions.grouping


def decide(inputs: DedupInputs, grouped: Grouped) -> Decided:
    """The chosen method's ``groups`` with the pins applied (the third phase).

    Args:
        inputs: the run's inputs (order rank, pairs, previous version, reference).
        grouped: the chosen method's groups at the threshold, copies joined.
    """
    options, n, groups, radius = inputs.options, inputs.n, grouped.groups, grouped.radius
    decisions = decide_groups(
        groups,
        inputs.corpus.rank,
        inputs.source.pairs,
        options.threshold if radius is None else radius,
        pinned_rows(inputs.stability, inputs.ids, n),
        inputs.reference,
        chain=not grouped.holds_threshold,
    )
    reference, texts = inputs.reference, inputs.corpus.texts
    every_id, shown = shown_ids(inputs.ids.array, reference)
    all_ids = inputs.ids if reference is None else ItemIds(every_id)
    if reference is not None:
        texts = {**texts, **reference_texts(reference, decisions, shown)}
    final, previous = decisions.grouping, inputs.stability.previous
    return Decided(
        decisions,
        every_id,
        shown,
        all_ids,
        texts,
        stable_group_ids(final, all_ids, previous),
        changes(final, all_ids, decisions.corpus_kept, previous),
    )
