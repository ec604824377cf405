import gzip
import json

import numpy as np
import pytest

from sbert_core import DataFileError
from sbert_core.evaluation.evaluators import STSEvaluator, paired_similarities, sts_correlations
from sbert_core.tabular import read_table


def test_similarities_by_hand():
    a = np.array([[3.0, 4.0], [1.0, 0.0]])
    b = np.array([[3.0, 4.0], [0.0, 2.0]])
    sims = paired_similarities(a, b)
    assert np.allclose(sims["cosine"], [1.0, 0.0])
    assert np.allclose(sims["dot"], [25.0, 0.0])
    assert np.allclose(sims["manhattan"], [0.0, -3.0])
    assert np.allclose(sims["euclidean"], [0.0, -np.sqrt(5)])


def test_planted_perfect_ranking():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(50, 8))
    angles = np.linspace(0.0, np.pi / 2, 50)
    # b_i is a_i rotated away in its own plane: cosine falls strictly with the angle.
    noise = rng.normal(size=(50, 8))
    noise -= (noise * a).sum(1, keepdims=True) / (a * a).sum(1, keepdims=True) * a
    b = a / np.linalg.norm(a, axis=1, keepdims=True) * np.cos(angles)[:, None]
    b += noise / np.linalg.norm(noise, axis=1, keepdims=True) * np.sin(angles)[:, None]
    gold = 5.0 - angles
    metrics = sts_correlations(a, b, gold)
    assert metrics["cosine_spearman"] == pytest.approx(100.0)
    assert sts_correlations(a, b, -gold)["cosine_spearman"] == pytest.approx(-100.0)


def _write_tsv(path, lines):
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def test_sts_file_with_quotes_and_extra_columns(tmp_path, tiny_encoder):
    path = tmp_path / "pairs.tsv.gz"
    _write_tsv(
        path,
        [
            "score\tsentence1\tsentence2\tgenre",
            '5.0\t"a man plays\ta man plays\tnews\textra licence',
            "1.0\tthe dog runs\thow do i play music?\tnews",
            "3.2\tsky\tthe sky\tnews",
        ],
    )
    evaluator = STSEvaluator.from_file(path)
    assert evaluator.sentences1[0] == '"a man plays'
    metrics = evaluator(tiny_encoder)
    assert metrics["n_pairs"] == 3
    assert -100.0 <= metrics["cosine_spearman"] <= 100.0


def test_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("score\tsentence1\n1.0\ta\n")
    with pytest.raises(DataFileError, match=r"pairs\.tsv.*'sentence2'"):
        STSEvaluator.from_file(path)


def test_non_numeric_score_names_row_and_column(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("score,sentence1,sentence2\n1.0,a,b\nhigh,c,d\n")
    with pytest.raises(DataFileError, match=r"pairs\.csv: row 2, column 'score': 'high'"):
        STSEvaluator.from_file(path)


def test_empty_sentence_names_row_and_column(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [
        {"score": 1, "sentence1": "a", "sentence2": "b"},
        {"score": 2, "sentence1": " ", "sentence2": "c"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(DataFileError, match="row 2, column 'sentence1'"):
        STSEvaluator.from_file(path)


def test_parquet_and_bad_json(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"score": [1.0, 2.0], "sentence1": ["a", "b"], "sentence2": ["c", "d"]}),
        tmp_path / "p.parquet",
    )
    assert STSEvaluator.from_file(tmp_path / "p.parquet").scores == [1.0, 2.0]
    (tmp_path / "bad.jsonl").write_text('{"score": 1}\n{not json\n')
    with pytest.raises(DataFileError, match="row 2 is not valid JSON"):
        read_table(tmp_path / "bad.jsonl")


def test_a_row_nested_thousands_deep_is_one_clear_error(tmp_path):
    deep = '{"score": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (tmp_path / "deep.jsonl").write_text('{"score": 1}\n' + deep + "\n")
    with pytest.raises(DataFileError, match="row 2 is JSON nested too deep"):
        read_table(tmp_path / "deep.jsonl")


def test_unknown_extension(tmp_path):
    (tmp_path / "x.xlsx").write_text("")
    with pytest.raises(DataFileError, match="cannot tell the format"):
        read_table(tmp_path / "x.xlsx")
