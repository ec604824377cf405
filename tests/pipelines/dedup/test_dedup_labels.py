"""Calibration on labelled pairs: hand-computed P/R/F1, thresholds, the labels file."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from sbert_pipeline.dedup.sources import LabelColumns, read_labelled_pairs
from sbert_pipeline.grouping.labels import (
    LabelledPairs,
    best_f1_point,
    for_precision,
    label_sweep,
    match_labels,
    pair_counts,
    pr_curve,
)
from sbert_pipeline.grouping.methods import group_items, sweep_groupings
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.ranking import rank_items

from sbert_core.errors import DataFileError

IDS = ["q0", "q1", "q2", "q3", "q4", "q5"]
# Items 0-1 0.95, 1-2 0.85, 3-4 0.75, 4-5 0.65.
PAIRS = IndexedPairs(
    np.array([0, 1, 3, 4]), np.array([1, 2, 4, 5]), np.array([0.95, 0.85, 0.75, 0.65], np.float32)
)


def _labels_file(tmp_path, text: str, name: str = "pairs.tsv") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _labelled(tmp_path) -> LabelledPairs:
    """Six labelled pairs over the items, one naming an unknown id, one pairing q5 with itself."""
    text = (
        "left\tright\tdup\n"
        "q0\tq1\t1\n"
        "q0\tq2\t1\n"
        "q1\tq2\t0\n"
        "q3\tq4\t1\n"
        "q4\tq5\ttrue\n"
        "q0\tq3\t0\n"
        "q0\tq9\t1\n"
        "q5\tq5\t1\n"
    )
    raw = read_labelled_pairs(_labels_file(tmp_path, text), LabelColumns("left", "right", "dup"))
    return match_labels(raw, IDS)


def test_hand_computed_precision_recall_f1(tmp_path):
    labelled = _labelled(tmp_path)
    assert (labelled.read, len(labelled.a), labelled.unknown, labelled.same_item) == (8, 6, 1, 1)
    assert labelled.positives == 4
    rank = rank_items("first", 6)
    # At 0.8: groups {0,1,2}; {3},{4},{5} alone.
    # (q0,q1) dup same: TP; (q0,q2) dup same: TP; (q1,q2) non-dup same: FP;
    # (q3,q4) dup apart: FN; (q4,q5) dup apart: FN; (q0,q3) non-dup apart: TN.
    # P = 2/3, R = 2/4, F1 = 2 * (2/3) * (1/2) / (2/3 + 1/2) = 4/7.
    counts = pair_counts(group_items("components", 6, PAIRS, 0.8, rank).labels(), labelled)
    assert (counts.tp, counts.fp, counts.fn, counts.tn) == (2, 1, 2, 1)
    assert counts.precision == pytest.approx(2 / 3)
    assert counts.recall == pytest.approx(0.5)
    assert counts.f1 == pytest.approx(4 / 7)
    # At 0.7 also {3,4}: TP 3, FP 1, FN 1: P = R = F1 = 3/4. At 0.6 all four: P 4/5, R 1.
    # At 0.9 only {0,1}: TP 1, FP 0, FN 3: P 1, R 1/4, F1 = 2/5.
    thresholds = [0.6, 0.7, 0.8, 0.9]
    groupings = sweep_groupings("components", 6, PAIRS, thresholds, lambda t: rank)
    points = label_sweep(groupings, labelled)
    assert [round(p.f1, 6) for p in points] == [round(x, 6) for x in (8 / 9, 3 / 4, 4 / 7, 2 / 5)]
    assert [p.precision for p in points] == pytest.approx([4 / 5, 3 / 4, 2 / 3, 1.0])
    best = best_f1_point(points)
    assert (best.threshold, best.largest, best.removed) == (0.6, 3, 4)
    assert for_precision(points, 0.75).threshold == 0.6  # highest recall with P >= 0.75
    assert for_precision(points, 0.85).threshold == 0.9
    assert for_precision(points, 0.95).threshold == 0.9
    assert for_precision([p for p in points if p.threshold < 0.9], 0.95) is None
    curve = pr_curve(points[::-1])
    assert curve["threshold"] == thresholds
    assert curve["recall"] == [1.0, 0.75, 0.5, 0.25]


def test_removed_item_counts_in_its_representatives_group(tmp_path):
    """Ranked at 0.8: 0 kept, 1 joins 0, 2 kept (its better neighbour 1 was removed)."""
    labelled = _labelled(tmp_path)
    grouping = group_items("ranked", 6, PAIRS, 0.8, rank_items("first", 6))
    counts = pair_counts(grouping.labels(), labelled)
    # Same group only (q0,q1): TP 1; (q0,q2) and both q3-q5 pairs FN; no FP.
    assert (counts.tp, counts.fp, counts.fn) == (1, 0, 3)


def test_labelled_pairs_formats_and_errors(tmp_path):
    csv_path = tmp_path / "pairs.csv.gz"
    with gzip.open(csv_path, "wt", encoding="utf-8") as handle:
        handle.write('qid1,qid2,is_duplicate\n1,2,0\n"3",4,1\n')
    raw = read_labelled_pairs(csv_path)
    assert raw.id_a == ["1", "3"] and raw.label.tolist() == [False, True]
    jsonl = _labels_file(tmp_path, '{"qid1": 1, "qid2": 2, "is_duplicate": true}\n', "p.jsonl")
    assert read_labelled_pairs(jsonl).id_b == ["2"]
    bad = _labels_file(tmp_path, "qid1\tqid2\tis_duplicate\n1\t2\t0.5\n", "bad.tsv")
    with pytest.raises(DataFileError, match=r"row 1, column 'is_duplicate'.*0/1 label"):
        read_labelled_pairs(bad)
    empty_id = _labels_file(tmp_path, "qid1\tqid2\tis_duplicate\n\t2\t1\n", "empty.tsv")
    with pytest.raises(DataFileError, match="expected an id"):
        read_labelled_pairs(empty_id)
    with pytest.raises(DataFileError, match="missing column"):
        read_labelled_pairs(bad, LabelColumns(label="label"))
    negatives = _labels_file(tmp_path, "a\tb\tl\nq0\tq1\t0\n", "neg.tsv")
    no_positive = match_labels(read_labelled_pairs(negatives, LabelColumns("a", "b", "l")), IDS)
    with pytest.raises(ValueError, match="none of the 1 usable labelled pairs"):
        label_sweep([group_items("components", 6, PAIRS, 0.8, np.arange(6))], no_positive)
    with pytest.raises(ValueError, match="target precision"):
        for_precision([], 1.5)
