"""Labelled duplicate pairs: the component-wise split keeps every question, pair and group in one
part; groups are the duplicate components with copies of a text; the examples of a part."""

import random

import numpy as np
import pytest
from testdata import DATA_DIR
from training_examples import write_tsv

from sbert_core.errors import DataFileError
from sbert_core.training.data import DataSpec, load_duplicate_split, load_examples
from sbert_core.training.duplicate_pairs import (
    DuplicatePairs,
    smallest_node_labels,
    split_duplicate_pairs,
)

HEADER = ("id1", "id2", "sentence1", "sentence2", "label")
QQP_COLUMNS = {
    "id1": "qid1",
    "id2": "qid2",
    "sentence1": "question1",
    "sentence2": "question2",
    "label": "is_duplicate",
}


def planted_pairs(n_questions: int, n_pairs: int, seed: int) -> DuplicatePairs:
    """Random labelled pairs over ``n_questions`` questions; a few texts are copies that differ
    only in case."""
    rng = random.Random(seed)
    texts = {f"q{i}": f"question {i}" for i in range(n_questions)}
    for i in range(0, n_questions, 17):  # copies under a case-folding key
        texts[f"q{i + 1}"] = texts[f"q{i}"].upper() if i + 1 < n_questions else texts[f"q{i}"]
    rows = []
    for _ in range(n_pairs):
        a, b = rng.sample(range(n_questions), 2)
        rows.append((f"q{a}", f"q{b}", rng.random() < 0.4))
    id1, id2, label = zip(*rows, strict=True)
    return DuplicatePairs(
        id1, id2, tuple(texts[i] for i in id1), tuple(texts[i] for i in id2), np.array(label)
    )


def brute_force_components(n, edges):
    """Reference: repeated relabelling until no edge joins two labels."""
    label = list(range(n))
    changed = True
    while changed:
        changed = False
        for x, y in edges:
            low = min(label[x], label[y])
            for node in (x, y):
                if label[node] != low:
                    label[node], changed = low, True
    return label


@pytest.mark.parametrize("seed", range(6))
def test_split_keeps_components_questions_and_groups_in_one_part(seed):
    pairs = planted_pairs(400, 150, seed)  # sparse: many small components
    split = split_duplicate_pairs(pairs, 0.5, seed, text_key=str.casefold)
    n = len(split.ids)
    holdout, train = split.questions_in("holdout"), split.questions_in("train")
    assert set(holdout).isdisjoint(train) and len(holdout) + len(train) == n
    assert {int(c) for c in split.component[holdout]}.isdisjoint(split.component[train].tolist())
    assert {int(g) for g in split.group[holdout]}.isdisjoint(split.group[train].tolist())
    # Every labelled pair lies in one part, both its questions with it.
    assert np.array_equal(split.holdout[split.row1], split.holdout[split.row2])
    in_holdout = split.rows_in("holdout")
    assert np.array_equal(in_holdout, ~split.rows_in("train"))
    # Components: every labelled pair and every copy; groups: duplicates and copies only.
    key = [split.texts[q].casefold() for q in range(n)]
    copies = [(q, key.index(key[q])) for q in range(n) if key.index(key[q]) != q]
    edges = list(zip(split.row1.tolist(), split.row2.tolist(), strict=True))
    dup_edges = [e for e, is_dup in zip(edges, split.label, strict=True) if is_dup]
    assert split.component.tolist() == brute_force_components(n, edges + copies)
    assert split.group.tolist() == brute_force_components(n, dup_edges + copies)
    assert len(holdout) and len(train)


def test_split_follows_the_seed_and_not_the_row_order():
    pairs = planted_pairs(200, 150, 3)
    split = split_duplicate_pairs(pairs, 0.3, seed=9)
    order = list(range(len(pairs.id1)))
    random.Random(1).shuffle(order)
    shuffled = DuplicatePairs(
        *(tuple(column[i] for i in order) for column in (pairs.id1, pairs.id2)),
        *(tuple(column[i] for i in order) for column in (pairs.text1, pairs.text2)),
        pairs.label[order],
    )
    again = split_duplicate_pairs(shuffled, 0.3, seed=9)

    def holdout_ids(s):
        return {s.ids[q] for q in s.questions_in("holdout")}

    assert holdout_ids(again) == holdout_ids(split)
    assert holdout_ids(split_duplicate_pairs(pairs, 0.3, seed=10)) != holdout_ids(split)
    assert not holdout_ids(split_duplicate_pairs(pairs, 0.0, seed=9))
    assert len(holdout_ids(split_duplicate_pairs(pairs, 1.0, seed=9))) == len(split.ids)


def test_smallest_node_labels_match_a_brute_force_reference():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 50, 40), rng.integers(0, 50, 40)
    assert smallest_node_labels(50, a, b).tolist() == brute_force_components(
        50, list(zip(a, b, strict=True))
    )


def write_pairs(path, rows):
    return write_tsv(path, HEADER, rows)


def test_duplicate_pairs_examples_are_the_parts_positives_with_groups(tmp_path):
    rows = [
        ("1", "2", "how to cook rice", "how do I cook rice", "1"),
        ("2", "3", "how do I cook rice", "best way to cook rice", "1"),
        ("4", "5", "what is a cat", "what is a dog", "0"),
        ("6", "7", "who wrote hamlet", "hamlet author", "1"),
        ("8", "9", "HOW TO COOK RICE?", "rice recipe", "1"),
    ]
    path = write_pairs(tmp_path / "pairs.tsv", rows)
    examples = load_examples(DataSpec(path=str(path), kind="duplicate_pairs"), str.casefold)
    assert examples.kind == "pairs" and len(examples) == 4  # the 4 duplicate pairs
    assert examples.texts[0][3] == "HOW TO COOK RICE?"
    groups = examples.groups.tolist()
    assert groups[0] == groups[1] and groups[2] != groups[0]
    assert groups[3] != groups[0]  # "HOW TO COOK RICE?" is no copy of "how to cook rice"
    spec = DataSpec(path=str(path), kind="duplicate_pairs")
    split = load_duplicate_split(spec, lambda t: t.casefold().rstrip("?"))
    assert split.group[split.ids.index("8")] == split.group[split.ids.index("1")]
    for seed in range(10):
        sizes = []
        for part in ("train", "holdout"):
            spec = DataSpec(path=str(path), kind="duplicate_pairs", part=part, split_seed=seed)
            try:
                sizes.append(len(load_examples(spec)))
            except DataFileError as err:
                assert f"no duplicate pairs in the {part} part" in str(err)
                sizes.append(0)
        assert sum(sizes) == 4  # the parts share out the duplicates


def test_max_pairs_per_group_caps_each_group(tmp_path):
    rows = [("0", str(i), "hub question", f"variant {i}", "1") for i in range(1, 11)]
    rows += [("20", "21", "other", "another", "1")]
    path = write_pairs(tmp_path / "pairs.tsv", rows)
    spec = DataSpec(path=str(path), kind="duplicate_pairs", max_pairs_per_group=3)
    examples = load_examples(spec)
    assert len(examples) == 4
    assert sorted(np.unique(examples.groups, return_counts=True)[1].tolist()) == [1, 3]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([("1", "2", "a", "b", "1"), ("1", "3", "other", "c", "0")], "row 2: id '1' has the text"),
        ([("1", "2", "a", "b", "maybe")], "row 1, column 'label': expected a duplicate label"),
        ([("1", "1", "a", "a", "1")], "row 1: pairs the id '1' with itself"),
        ([("", "2", "a", "b", "1")], "row 1, column 'id1': expected an id"),
    ],
)
def test_bad_duplicate_pairs_name_the_row(tmp_path, rows, message):
    path = write_pairs(tmp_path / "pairs.tsv", rows)
    with pytest.raises(DataFileError, match=message):
        load_examples(DataSpec(path=str(path), kind="duplicate_pairs"))


def test_a_part_needs_duplicate_pairs(tmp_path):
    path = write_tsv(tmp_path / "p.tsv", ("anchor", "positive"), [("a", "b")])
    with pytest.raises(ValueError, match="needs kind duplicate_pairs"):
        load_examples(DataSpec(path=str(path), kind="pairs", part="train"))


def test_qqp_dev_split_shares_no_question_and_no_component():
    spec = DataSpec(
        path=str(DATA_DIR / "qqp" / "dev_pairs.tsv.gz"),
        kind="duplicate_pairs",
        columns=QQP_COLUMNS,
        split_seed=42,
    )
    split = load_duplicate_split(spec)
    holdout, train = split.questions_in("holdout"), split.questions_in("train")
    assert len(split.ids) == 158_678 and len(holdout) + len(train) == len(split.ids)
    assert 0.45 < len(holdout) / len(split.ids) < 0.55
    assert {split.ids[q] for q in holdout}.isdisjoint(split.ids[q] for q in train)
    assert set(split.component[holdout].tolist()).isdisjoint(split.component[train].tolist())
    assert np.array_equal(split.holdout[split.row1], split.holdout[split.row2])
