"""Reading training examples: formats, column mappings, NLI triplets, and every validation error
naming file, row and column before training starts."""

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testdata import DATA_DIR, read_tsv
from training_examples import write_tsv

from sbert_core.errors import DataFileError
from sbert_core.training.data import DataSpec, ExampleSet, load_examples, nli_triplets

STS_HEADER = ("score", "sentence1", "sentence2")


@pytest.fixture
def sts_file(tmp_path):
    rows = [
        ("5.0", "a man plays", "a man is playing"),
        ("0", "a dog runs", "the sky"),
        ("2.5", "x y", "y x"),
    ]
    return write_tsv(tmp_path / "sts.tsv", STS_HEADER, rows)


def test_scored_pairs_are_scaled_to_unit_range(sts_file):
    examples = load_examples(DataSpec(path=str(sts_file)))
    assert examples.kind == "scored_pairs" and len(examples) == 3
    assert examples.texts[0] == ("a man plays", "a dog runs", "x y")
    assert examples.targets.tolist() == [1.0, 0.0, 0.5]
    assert examples.targets.dtype == np.float32
    assert len(load_examples(DataSpec(path=str(sts_file), limit=2))) == 2


def test_shared_stsb_and_snli_files_load():
    stsb = load_examples(DataSpec(path=str(DATA_DIR / "stsb" / "train.tsv.gz")))
    assert len(stsb) == 5749 and stsb.targets.min() >= 0 and stsb.targets.max() <= 1
    snli = load_examples(
        DataSpec(path=str(DATA_DIR / "snli" / "dev.tsv.gz"), kind="labelled_pairs")
    )
    assert len(snli) == 9842
    assert np.bincount(snli.targets).tolist() == [3329, 3235, 3278]  # entailment, neutral, contra.


def test_column_mapping_in_csv_jsonl_and_parquet(tmp_path):
    csv_file = tmp_path / "pairs.csv.gz"
    with gzip.open(csv_file, "wt", encoding="utf-8") as handle:
        handle.write('q,answer,gold\n"hello, world",hi,entailment\nbye,"so ""long""",neutral\n')
    spec = DataSpec(
        path=str(csv_file),
        kind="labelled_pairs",
        columns={"sentence1": "q", "sentence2": "answer", "label": "gold"},
    )
    examples = load_examples(spec)
    assert examples.texts == (("hello, world", "bye"), ("hi", 'so "long"'))
    assert examples.targets.tolist() == [0, 1]
    assert examples.label_names == ("entailment", "neutral", "contradiction")

    jsonl = tmp_path / "triplets.jsonl"
    jsonl.write_text(json.dumps({"a": "one", "positive": "two", "negative": "three"}) + "\n")
    triplets = load_examples(DataSpec(path=str(jsonl), kind="triplets", columns={"anchor": "a"}))
    assert triplets.texts == (("one",), ("two",), ("three",)) and triplets.targets is None

    parquet = tmp_path / "pairs.parquet"
    pq.write_table(pa.table({"anchor": ["q1", "q2"], "positive": ["d1", "d2"]}), parquet)
    pairs = load_examples(DataSpec(path=str(parquet), kind="pairs"))
    assert pairs.kind == "pairs" and pairs.texts == (("q1", "q2"), ("d1", "d2"))


def test_integer_labels_with_declared_names(tmp_path):
    jsonl = tmp_path / "labels.jsonl"
    rows = [{"sentence1": "a", "sentence2": "b", "label": value} for value in (1, 0, 1)]
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    spec = DataSpec(path=str(jsonl), kind="labelled_pairs", labels=("0", "1"))
    assert load_examples(spec).targets.tolist() == [1, 0, 1]


@pytest.mark.parametrize(
    ("rows", "spec", "message"),
    [
        (
            [("5", "ok", "fine"), ("7.5", "too", "high")],
            {},
            r"sts\.tsv: row 2, column 'score': score 7\.5 is outside the declared range \[0, 5\]",
        ),
        (
            [("1", "ok", "fine"), ("high", "a", "b")],
            {},
            r"sts\.tsv: row 2, column 'score': 'high' is not a number",
        ),
        (
            [("1", "ok", "fine"), ("2", "a", " ")],
            {},
            r"sts\.tsv: row 2, column 'sentence2': expected non-empty text",
        ),
        (
            [("1", "ok", "fine")],
            {"columns": {"sentence1": "premise"}},
            r"sts\.tsv: missing column\(s\) 'premise'",
        ),
        ([], {}, r"sts\.tsv: no examples"),
        (
            [("0.5", "ok", "fine")],
            {"score_range": (0, 1), "kind": "labelled_pairs", "columns": {"label": "score"}},
            r"sts\.tsv: row 1, column 'score': unknown label '0\.5'; declared labels: entailment",
        ),
    ],
)
def test_bad_data_names_file_row_and_column(tmp_path, rows, spec, message):
    path = write_tsv(tmp_path / "sts.tsv", STS_HEADER, rows)
    with pytest.raises(DataFileError, match=message):
        load_examples(DataSpec(path=str(path), **spec))


def test_bad_specs_are_refused(sts_file, tmp_path):
    with pytest.raises(ValueError, match="roles are: sentence1, sentence2, score"):
        load_examples(DataSpec(path=str(sts_file), columns={"anchor": "score"}))
    with pytest.raises(ValueError, match="low < high"):
        load_examples(DataSpec(path=str(sts_file), score_range=(5, 0)))
    with pytest.raises(DataFileError, match="no such file"):
        load_examples(DataSpec(path=str(tmp_path / "missing.tsv")))


def test_nli_triplets_pair_each_entailment_with_a_contradiction():
    premises = ["p1", "p1", "p1", "p2", "p2", "p3", "p3", "p3"]
    hypotheses = ["e1", "n1", "c1", "e2", "n2", "e3", "e3b", "c3"]
    labels = [0, 1, 2, 0, 1, 0, 0, 2]  # p2 has no contradiction
    triplets = nli_triplets(premises, hypotheses, labels)
    assert list(zip(*triplets.texts, strict=True)) == [
        ("p1", "e1", "c1"),
        ("p3", "e3", "c3"),
        ("p3", "e3b", "c3"),
    ]
    with pytest.raises(DataFileError, match="no premise has both"):
        nli_triplets(["p"], ["h"], [0], source="x.tsv")


def test_nli_triplets_from_snli_dev():
    spec = DataSpec(path=str(DATA_DIR / "snli" / "dev.tsv.gz"), kind="nli_triplets")
    triplets = load_examples(spec)
    rows = read_tsv(DATA_DIR / "snli" / "dev.tsv.gz")
    entailed = {(r["sentence1"], r["sentence2"]) for r in rows if r["label"] == "entailment"}
    contradicted = {(r["sentence1"], r["sentence2"]) for r in rows if r["label"] == "contradiction"}
    assert triplets.kind == "triplets" and 3000 < len(triplets) <= 3329
    for anchor, positive, negative in list(zip(*triplets.texts, strict=True))[:200]:
        assert (anchor, positive) in entailed and (anchor, negative) in contradicted


def test_select_and_fingerprint(sts_file):
    examples = load_examples(DataSpec(path=str(sts_file)))
    picked = examples.select([2, 0])
    assert picked.texts[1] == ("y x", "a man is playing") and picked.targets.tolist() == [0.5, 1.0]
    assert examples.fingerprint() == load_examples(DataSpec(path=str(sts_file))).fingerprint()
    assert picked.fingerprint() != examples.fingerprint()
    with pytest.raises(ValueError, match="different lengths"):
        ExampleSet("pairs", (("a", "b"), ("c",)))
