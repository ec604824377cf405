"""Hard negatives for duplicate pairs: labelled and mined candidates against brute force, only
train-part questions, never a duplicate of the anchor, sampler groups that keep every
negative away from the anchors it duplicates, and the config's errors."""

import random

import numpy as np
import pytest
from training_examples import write_tsv

from sbert_core.errors import DataFileError
from sbert_core.training.data import DataSpec, load_examples
from sbert_core.training.duplicate_pairs import DuplicatePairs, split_duplicate_pairs
from sbert_core.training.group_batches import group_exclusive_batches
from sbert_core.training.hard_negatives import (
    HardNegativeConfig,
    build_triplets,
    labelled_candidates,
    mined_candidates,
)

HEADER = ("id1", "id2", "sentence1", "sentence2", "label")


def planted_split(seed: int, n_questions: int = 240, n_pairs: int = 260):
    """Random labelled pairs (40% duplicates) split by components, with unit vectors near a
    random centre per duplicate group, and holdout questions planted near train anchors."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n_pairs):
        a, b = rng.sample(range(n_questions), 2)
        rows.append((f"q{a}", f"q{b}", rng.random() < 0.4))
    id1, id2, label = zip(*rows, strict=True)
    pairs = DuplicatePairs(
        id1, id2, tuple(f"text {i}" for i in id1), tuple(f"text {i}" for i in id2), np.array(label)
    )
    split = split_duplicate_pairs(pairs, 0.3, seed)
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(split.ids), 16))
    vectors = (centres[split.group] + 0.6 * rng.normal(size=centres.shape)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    train_rows = np.flatnonzero(split.rows_in("train") & split.label)
    q1, q2 = split.row1[train_rows], split.row2[train_rows]
    # Each holdout question sits just inside the guards of a train anchor (cosine 0.9 x the
    # positive's), nearer than any other group's question: mining the holdout would pick it.
    for k, h in enumerate(split.questions_in("holdout").tolist()):
        a, p = q1[k % q1.size], q2[k % q1.size]
        target = 0.9 * max(float(vectors[a] @ vectors[p]), 0.1)
        other = rng.normal(size=16)
        other -= (other @ vectors[a]) * vectors[a]
        other /= np.linalg.norm(other)
        vectors[h] = target * vectors[a] + np.sqrt(1 - target**2) * other
    return split, vectors, q1, q2


def labelled_duplicate(split) -> set[tuple[int, int]]:
    pairs = zip(split.row1[split.label].tolist(), split.row2[split.label].tolist(), strict=True)
    return {frozenset(pair) for pair in pairs}


@pytest.mark.parametrize("seed", range(4))
def test_labelled_candidates_match_a_brute_force_reference(seed):
    split, _, q1, q2 = planted_split(seed)
    found = labelled_candidates(split, q1, q2)
    non_duplicates = [
        (int(a), int(b))
        for a, b, dup in zip(split.row1, split.row2, split.label, strict=True)
        if not dup
    ]
    for a, p, candidates in zip(q1.tolist(), q2.tolist(), found, strict=True):
        expected = set()
        for x, y in non_duplicates:
            for side, other in ((x, y), (y, x)):
                if side in (a, p) and split.group[other] != split.group[a]:
                    expected.add(other)
        expected = {q for q in expected if not split.holdout[q]}
        assert sorted(candidates) == sorted(expected) and len(candidates) == len(set(candidates))


@pytest.mark.parametrize(("seed", "margin", "max_score"), [(0, 0.0, None), (1, 0.05, 0.4)])
def test_mined_candidates_match_a_brute_force_reference(seed, margin, max_score):
    split, vectors, q1, q2 = planted_split(seed)
    config = HardNegativeConfig(
        mode="mined", range_max=5, relative_margin=margin, max_score=max_score
    )
    found = mined_candidates(split, vectors, q1, q2, config, block=7)
    train = split.questions_in("train")
    for a, p, candidates in zip(q1.tolist(), q2.tolist(), found, strict=True):
        outside = [q for q in train.tolist() if split.group[q] != split.group[a]]
        ranked = sorted(outside, key=lambda q: -float(vectors[a] @ vectors[q]))[:5]
        bound = (1 - margin) * float(vectors[a] @ vectors[p])
        if max_score is not None:
            bound = min(bound, max_score)
        expected = [q for q in ranked if float(vectors[a] @ vectors[q]) <= bound + 1e-6]
        assert candidates == expected


@pytest.mark.parametrize("mode", ["labelled", "mined", "labelled+mined"])
@pytest.mark.parametrize("seed", range(3))
def test_negatives_are_train_questions_outside_the_anchors_group(mode, seed):
    split, vectors, q1, q2 = planted_split(seed)
    assert split.holdout.any()
    triplets = build_triplets(split, q1, q2, HardNegativeConfig(mode=mode), vectors, seed)
    assert triplets.keep.all() and sum(triplets.counts.values()) == q1.size
    negatives = triplets.negative[triplets.keep]
    assert not split.holdout[negatives].any()  # never a holdout question
    duplicates = labelled_duplicate(split)
    for a, p, n in zip(q1.tolist(), q2.tolist(), negatives.tolist(), strict=True):
        assert split.group[n] != split.group[a]
        assert frozenset((a, n)) not in duplicates and frozenset((p, n)) not in duplicates
    if mode != "labelled":
        assert triplets.counts["mined"] > 0  # the holdout copies were nearer, and skipped


def conflicts(batches, anchor_group, negative_group) -> int:
    """Example pairs (i, j) of one batch where j's positive or negative is in i's group."""
    count = 0
    for batch in batches:
        for i in batch.tolist():
            for j in batch.tolist():
                if i != j and anchor_group[i] in (anchor_group[j], negative_group[j]):
                    count += 1
    return count


@pytest.mark.parametrize("mode", ["labelled", "mined"])
def test_batches_never_hold_a_negative_that_duplicates_another_anchor(mode):
    bad_with_anchor_groups = 0
    for seed in range(4):
        split, vectors, q1, q2 = planted_split(seed)
        triplets = build_triplets(split, q1, q2, HardNegativeConfig(mode=mode), vectors, seed)
        anchor_group, negative_group = split.group[q1], split.group[triplets.negative]
        sizes = np.unique(triplets.groups, return_counts=True)[1]
        cap = max(np.unique(anchor_group, return_counts=True)[1].max(), -(-q1.size // 32))
        assert sizes.max() <= cap
        for epoch in range(3):
            batches = group_exclusive_batches(triplets.groups, 8, seed, epoch)
            assert conflicts(batches, anchor_group, negative_group) == 0
            old = group_exclusive_batches(anchor_group, 8, seed, epoch)
            bad_with_anchor_groups += conflicts(old, anchor_group, negative_group)
    assert bad_with_anchor_groups > 0  # the anchors' groups alone do not keep negatives apart


def test_load_examples_builds_triplets_of_the_train_part(tmp_path):
    rows = [
        ("1", "2", "how to cook rice", "how do I cook rice", "1"),
        ("1", "3", "how to cook rice", "how to cook pasta", "0"),
        ("4", "5", "who wrote hamlet", "hamlet author", "1"),
        ("6", "4", "who wrote macbeth", "who wrote hamlet", "0"),
    ]
    path = write_tsv(tmp_path / "pairs.tsv", HEADER, rows)
    spec = DataSpec(
        path=str(path),
        kind="duplicate_pairs",
        part="train",
        holdout_fraction=0.0,
        hard_negatives=HardNegativeConfig(mode="labelled"),
    )
    assert spec.example_kind == "triplets"
    examples = load_examples(spec)
    assert examples.kind == "triplets"
    triplets = set(zip(*examples.texts, strict=True))
    assert triplets == {
        ("how to cook rice", "how do I cook rice", "how to cook pasta"),
        ("who wrote hamlet", "hamlet author", "who wrote macbeth"),
    }
    assert examples.groups[0] != examples.groups[1]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"mode": "nearest"}, "hard_negatives.mode must be one of none, labelled, mined"),
        ({"mode": "mined"}, "needs the base model's vectors"),
        ({"mode": "labelled", "range_max": 0}, "range_max must be >= 1"),
        ({"mode": "labelled", "relative_margin": 1.0}, r"relative_margin must lie in \[0, 1\)"),
        ({"mode": "labelled", "max_score": 2.0}, r"max_score must lie in \[-1, 1\]"),
        ({"mode": "labelled", "cap": 0}, "cap must be >= 1 or null"),
        ({"mode": "labelled", "vectors": "v.npy"}, "vectors and vector_ids go together"),
    ],
)
def test_bad_hard_negative_settings_are_refused(tmp_path, fields, message):
    path = write_tsv(tmp_path / "pairs.tsv", HEADER, [("1", "2", "a", "b", "1")])
    spec = DataSpec(
        path=str(path), kind="duplicate_pairs", hard_negatives=HardNegativeConfig(**fields)
    )
    with pytest.raises(ValueError, match=message):
        load_examples(spec)


def test_hard_negatives_need_the_train_part_of_duplicate_pairs(tmp_path):
    path = write_tsv(tmp_path / "pairs.tsv", HEADER, [("1", "2", "a", "b", "1")])
    labelled = HardNegativeConfig(mode="labelled")
    with pytest.raises(ValueError, match="hard_negatives need part train"):
        load_examples(DataSpec(path=str(path), kind="duplicate_pairs", hard_negatives=labelled))
    pairs = write_tsv(tmp_path / "sts.tsv", ("sentence1", "sentence2", "score"), [("a", "b", 1)])
    with pytest.raises(ValueError, match="hard_negatives need kind duplicate_pairs"):
        load_examples(DataSpec(path=str(pairs), kind="scored_pairs", hard_negatives=labelled))


def test_mining_needs_a_vector_for_every_train_question(tmp_path):
    rows = [("1", "2", "a", "b", "1"), ("3", "4", "c", "d", "0")]
    path = write_tsv(tmp_path / "pairs.tsv", HEADER, rows)
    np.save(tmp_path / "v.npy", np.eye(3, dtype=np.float32))
    (tmp_path / "ids.txt").write_text("1\n2\n3\n")
    config = HardNegativeConfig(
        mode="mined", vectors=str(tmp_path / "v.npy"), vector_ids=str(tmp_path / "ids.txt")
    )
    spec = DataSpec(
        path=str(path),
        kind="duplicate_pairs",
        part="train",
        holdout_fraction=0.0,
        hard_negatives=config,
    )
    with pytest.raises(DataFileError, match=r"1 train questions have no vector \(first '4'\)"):
        load_examples(spec)
