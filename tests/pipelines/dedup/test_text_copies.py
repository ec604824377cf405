"""Copies of one normalised text join their representative's group, for every method."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from sbert_pipeline.dedup.write import groups_parquet_table, reason_column
from sbert_pipeline.grouping.choices import METHODS
from sbert_pipeline.grouping.compare import MethodSettings, Ranker, sweep_methods, sweep_point
from sbert_pipeline.grouping.copies import TextCopies
from sbert_pipeline.grouping.methods import components_by_keep, group_items
from sbert_pipeline.grouping.model import REASONS, SAME_TEXT
from sbert_pipeline.grouping.pairs import IndexedPairs

from tests.planted import unit_rows

FLOOR = 0.5


def _pairs(vectors: np.ndarray) -> IndexedPairs:
    scores = (vectors @ vectors.T).astype(np.float32)
    a, b = np.triu_indices(len(vectors), 1)
    keep = scores[a, b] >= FLOOR
    return IndexedPairs(a[keep].astype(np.int64), b[keep].astype(np.int64), scores[a, b][keep])


def _planted(seed: int = 0):
    """Tight groups and background rows, then copies (same vectors) of some of them appended.

    Returns the original count, all vectors' pairs (as the pairs stage computes them, copies
    included), the original rows' pairs, and the copies.
    """
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((6, 16)))
    rows = [c + 0.25 * rng.standard_normal((int(rng.integers(2, 5)), 16)) / 4 for c in centres]
    rows.append(rng.standard_normal((8, 16)))
    original = unit_rows(np.concatenate(rows))
    n0 = len(original)
    # Copies of a grouped row, of a background row (in no group alone) and two of one row.
    heads = np.array([0, n0 - 1, n0 - 2, n0 - 2, 3])
    vectors = np.concatenate([original, original[heads]])
    copy_of = np.concatenate([np.full(n0, -1), heads]).astype(np.int64)
    return n0, _pairs(vectors), _pairs(original), TextCopies(copy_of)


def _partition(labels: np.ndarray, rows: np.ndarray) -> set[frozenset[int]]:
    found: dict[int, set[int]] = {}
    for row in rows.tolist():
        found.setdefault(int(labels[row]), set()).add(row)
    return {frozenset(members) for members in found.values()}


def _run(method: str, n: int, pairs: IndexedPairs, threshold: float, rank: np.ndarray):
    return group_items(method, n, pairs, threshold, rank, rep_threshold=threshold - 0.1, k=3)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("threshold", [0.8, 1.0])
def test_copies_join_their_representatives_group(method, threshold):
    n0, pairs, original_pairs, copies = _planted()
    n = len(copies.copy_of)
    # Reversed corpus order: every copy is ranked before its representative, and still is
    # never the kept member.
    rank = np.arange(n)[::-1].copy()
    joined = copies.join(_run(method, n, copies.distinct(pairs), threshold, rank), rank)
    reference = _run(method, n0, original_pairs, threshold, np.argsort(np.argsort(rank[:n0])))

    is_copy = copies.is_copy
    heads = copies.copy_of[is_copy]
    assert np.all(joined.group[is_copy] == joined.group[heads])
    assert np.all(joined.group[is_copy] >= 0)
    assert not joined.representative[is_copy].any()
    assert [REASONS[code] for code in joined.reason[is_copy]] == ["same normalised text"] * 5
    kept_head = joined.representative[heads]
    assert np.all(joined.matched_score[is_copy][kept_head] == np.float32(1.0))
    # The other rows are grouped exactly as without the copies.
    originals = np.arange(n0)
    assert _partition(joined.labels(), originals) == _partition(reference.labels(), originals)
    grouped = reference.group >= 0
    assert np.array_equal(joined.representative[:n0][grouped], reference.representative[grouped])
    # Counts add up: every copy is removed, nothing else changes.
    assert joined.n_removed == reference.n_removed + copies.n_copies
    assert int(joined.kept.sum()) + joined.n_removed == n
    assert joined.sizes.sum() == np.sum(joined.group >= 0)
    assert list(joined.sizes) == sorted(joined.sizes, reverse=True)


def test_components_groups_join_the_copies_and_write_the_reason():
    _, pairs, _, copies = _planted()
    n = len(copies.copy_of)
    rank = np.arange(n)
    distinct = copies.distinct(pairs)
    groups = components_by_keep(n, distinct, 0.8, "first", order_rank=rank)
    joined = copies.join(groups, rank)
    joined_scores, reasons = joined.matched_score, joined.reason
    grouping = copies.join(group_items("components", n, distinct, 0.8, rank), rank)
    assert np.array_equal(joined.group, grouping.group)
    assert np.array_equal(joined.representative, grouping.representative)
    assert np.array_equal(reasons[copies.is_copy], np.full(5, SAME_TEXT))
    assert joined.n_removed == groups.n_removed + 5
    ids = pa.array([f"q{i}" for i in range(n)])
    table = reason_column(groups_parquet_table(ids, joined, rank, joined_scores), ids, reasons)
    rows = {row["id"]: row for row in table.to_pylist()}
    copy_rows = np.flatnonzero(copies.is_copy)
    for copy, head in zip(copy_rows, copies.copy_of[copy_rows], strict=True):
        row = rows[f"q{copy}"]
        assert row["reason"] == "same normalised text"
        assert row["group"] == rows[f"q{head}"]["group"]
        if rows[f"q{head}"]["is_representative"]:
            assert row["score"] == 1.0
    assert all(row["reason"] is None for row in rows.values() if row["is_representative"])


def test_without_copies_nothing_changes():
    n0, _, original_pairs, _ = _planted()
    none = TextCopies.none(n0)
    rank = np.arange(n0)
    grouping = group_items("star", n0, original_pairs, 0.8, rank, rep_threshold=0.7)
    assert none.join(grouping, rank) is grouping
    assert none.distinct(original_pairs) is original_pairs
    groups = components_by_keep(n0, original_pairs, 0.8, "first", order_rank=rank)
    assert none.join(groups, rank) is groups


def test_the_sweep_counts_the_copies_for_every_method():
    _, pairs, _, copies = _planted()
    n = len(copies.copy_of)
    distinct = copies.distinct(pairs)
    settings = MethodSettings(method="components", keep="first", floor=FLOOR)
    ranker = Ranker(settings, n, distinct, np.arange(n))
    thresholds = [0.7, 0.8, 0.9]
    sweeps = sweep_methods(settings, distinct, thresholds, ranker, copies=copies)
    for sweep in sweeps:
        for threshold, point in zip(thresholds, sweep.points, strict=True):
            grouping = group_items(
                sweep.method,
                n,
                distinct,
                threshold,
                ranker(threshold),
                rep_threshold=settings.radius_at(threshold),
                k=settings.k,
            )
            assert point == sweep_point(copies.join(grouping, np.arange(n))), sweep.method


def test_copy_of_must_name_rows_that_are_not_copies():
    with pytest.raises(ValueError, match="not itself a copy"):
        TextCopies(np.array([-1, 0, 1]))
    with pytest.raises(ValueError, match="in range"):
        TextCopies(np.array([-1, 5]))
