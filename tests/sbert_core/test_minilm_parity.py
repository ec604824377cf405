"""Real-quality checks on the packaged all-MiniLM-L6-v2 against sentence-transformers."""

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from testdata import DATA_DIR

from sbert_core.evaluation.evaluators import STSEvaluator

pytestmark = pytest.mark.slow


def test_parity_normalised(minilm, st_minilm, stsb_test_sentences):
    expected = st_minilm.encode(stsb_test_sentences, batch_size=64)
    ours = minilm.encode(stsb_test_sentences)
    assert np.abs(ours - expected).max() <= 1e-5


def test_parity_without_normalisation(minilm, st_minilm, stsb_test_sentences):
    unnormalised = SentenceTransformer(modules=[st_minilm[0], st_minilm[1]], device="cpu")
    expected = unnormalised.encode(stsb_test_sentences, batch_size=64)
    ours = minilm.encode(stsb_test_sentences, normalize=False)
    # The check would pass trivially if both were unit vectors.
    assert np.abs(np.linalg.norm(expected, axis=1) - 1).max() > 0.1
    assert np.abs(ours - expected).max() <= 1e-5


def test_batch_invariance(minilm, stsb_test_sentences):
    # The longest sentences, where padding differs most between batch layouts, plus a spread.
    by_length = sorted(stsb_test_sentences, key=len)
    texts = by_length[-60:] + by_length[::25]
    one_by_one = np.vstack([minilm.encode([text]) for text in texts])
    for batch_size in (7, 128):
        batched = minilm.encode(texts, batch_size=batch_size)
        assert np.abs(batched - one_by_one).max() <= 1e-5


def test_stsb_test_spearman_via_cli(capsys):
    import json

    from sbert_pipeline.jobs.cli import main

    status = main(
        [
            "eval",
            "sts",
            "--model",
            "all-MiniLM-L6-v2",
            "--data",
            str(DATA_DIR / "stsb" / "test.tsv.gz"),
            "--json",
        ]
    )
    assert status == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["n_pairs"] == 1379
    assert abs(metrics["cosine_spearman"] - 82.03) <= 0.02


def test_metrics_match_sentence_transformers_evaluator(minilm, st_minilm):
    from sentence_transformers.sentence_transformer.evaluation import (
        EmbeddingSimilarityEvaluator,
    )

    ours = STSEvaluator.from_file(DATA_DIR / "stsb" / "dev.tsv.gz")
    subset = slice(0, 400)
    evaluator = STSEvaluator(ours.sentences1[subset], ours.sentences2[subset], ours.scores[subset])
    theirs = EmbeddingSimilarityEvaluator(
        evaluator.sentences1,
        evaluator.sentences2,
        evaluator.scores,
        similarity_fn_names=["cosine", "manhattan", "euclidean", "dot"],
        name="dev",
    )(st_minilm)
    metrics = evaluator(minilm)
    for name in ("cosine", "manhattan", "euclidean", "dot"):
        assert abs(metrics[f"{name}_spearman"] - 100 * theirs[f"dev_spearman_{name}"]) < 1e-3
        assert abs(metrics[f"{name}_pearson"] - 100 * theirs[f"dev_pearson_{name}"]) < 1e-3


def test_bfloat16_keeps_sts_quality():
    # Runs everywhere: CPUs without native bf16 emulate it (slower, same numbers).
    from sbert_core import SentenceEncoder

    fast = SentenceEncoder.load("all-MiniLM-L6-v2", device="cpu", dtype="bfloat16")
    assert fast.dtype == torch.bfloat16
    metrics = STSEvaluator.from_file(DATA_DIR / "stsb" / "test.tsv.gz")(fast)
    assert abs(metrics["cosine_spearman"] - 82.03) <= 0.05


def test_eval_pairs_matches_sentence_transformers_on_stsb(minilm, st_minilm, capsys):
    import json

    from sbert_pipeline.jobs.cli import main
    from sentence_transformers.sentence_transformer.evaluation import (
        BinaryClassificationEvaluator,
    )

    data = str(DATA_DIR / "stsb" / "test.tsv.gz")
    argv = [
        "eval",
        "pairs",
        "--data",
        data,
        "--label-col",
        "score",
        "--positive-min",
        "4",
        "--json",
    ]
    assert main(argv) == 0
    ours = json.loads(capsys.readouterr().out)
    evaluator = STSEvaluator.from_file(data)  # same pairs; labels from the score column
    labels = [int(score >= 4) for score in evaluator.scores]
    theirs = BinaryClassificationEvaluator(
        evaluator.sentences1, evaluator.sentences2, labels, similarity_fn_names=["cosine"]
    )(st_minilm)
    assert ours["n_positive"] == sum(labels)
    assert round(ours["cosine_ap"] / 100, 4) == round(theirs["cosine_ap"], 4)
    assert round(ours["cosine_f1"] / 100, 4) == round(theirs["cosine_f1"], 4)
    assert round(ours["cosine_f1_threshold"], 4) == round(theirs["cosine_f1_threshold"], 4)
