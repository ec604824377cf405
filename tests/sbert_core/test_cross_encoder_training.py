"""Training a cross-encoder (sbert_core.training.cross_encoder_*) on tiny random models.

The toy data uses tests/training_examples.py's three topics, which share no content words: a
pair of two music sentences is a positive, a pair from the other two topics a negative. The
words alone separate them, so a model that learns anything must lower the loss and rank every
positive first.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from training_examples import build_trainable_model, sentence, write_tsv

from sbert_core import CrossEncoder
from sbert_core.errors import DataFileError, ModelLoadError
from sbert_core.training.config import TrainingConfig
from sbert_core.training.cross_encoder_data import load_cross_encoder_pairs
from sbert_core.training.cross_encoder_eval import PairScoreEvaluator
from sbert_core.training.cross_encoder_fit import fit_cross_encoder
from sbert_core.training.cross_encoder_start import is_cross_encoder_folder, start_cross_encoder
from sbert_core.training.data import DataSpec, ExampleSet, HardNegativeConfig

# Training sets torch's thread count for the process (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def bi_encoder_dir(tmp_path_factory) -> Path:
    """A tiny sentence-transformers bi-encoder (no classification head), dropout off so that
    runs split differently are comparable step for step."""
    return build_trainable_model(tmp_path_factory.mktemp("bi"), dropout=False)


def toy_rows(n: int, seed: int) -> list[tuple[str, str, float]]:
    """(sentence1, sentence2, score): two music sentences score 5, two sentences of the other
    topics (animals, things) 0; the targets are 1 and 0 on the default score range [0, 5]."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        positive = rng.random() < 0.5
        topics = (0, 0) if positive else (rng.choice((1, 2)), rng.choice((1, 2)))
        rows.append((sentence(rng, topics[0]), sentence(rng, topics[1]), 5 if positive else 0))
    return rows


@pytest.fixture(scope="module")
def toy_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("toy")
    return write_tsv(folder / "train.tsv", ("sentence1", "sentence2", "score"), toy_rows(96, 1))


def toy_pairs(path: Path) -> ExampleSet:
    return load_cross_encoder_pairs(DataSpec(path=str(path), kind="scored_pairs"))


def quick(**overrides) -> TrainingConfig:
    settings = {
        "device": "cpu",
        "num_threads": 1,
        "batch_size": 16,
        # The tiny random model needs a large step to learn within a few dozen steps.
        "learning_rate": 5e-3,
        "log_every": 1,
        "epochs": 6,
        "checkpoint_every": 0,
        **overrides,
    }
    return TrainingConfig(**settings)


def bce(model: CrossEncoder, examples: ExampleSet) -> float:
    """Binary cross-entropy of the model's scores against the targets."""
    scores = model.predict(list(zip(*examples.texts, strict=True)))
    p = np.clip(scores.astype(np.float64), 1e-7, 1 - 1e-7)
    y = examples.targets.astype(np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


# ---------------------------------------------------------------------- the start model


def test_a_bi_encoder_gets_a_new_one_label_head_with_sigmoid(bi_encoder_dir):
    torch.manual_seed(0)
    model = start_cross_encoder(bi_encoder_dir, device="cpu")
    assert not is_cross_encoder_folder(bi_encoder_dir)
    assert model.num_labels == 1
    assert isinstance(model.activation, torch.nn.Sigmoid)
    assert model.max_length == 48  # the bi-encoder's max_seq_length
    # The encoder's own weights are the bi-encoder's, not random.
    from transformers import AutoModel

    encoder = AutoModel.from_pretrained(bi_encoder_dir)
    theirs = encoder.state_dict()["embeddings.word_embeddings.weight"]
    ours = model.model.state_dict()["bert.embeddings.word_embeddings.weight"]
    assert torch.equal(ours, theirs)
    scores = model.predict([("the man plays guitar", "a dog runs")])
    assert scores.shape == (1,) and 0 < scores[0] < 1


def test_a_requested_max_length_is_used_and_checked(bi_encoder_dir):
    assert start_cross_encoder(bi_encoder_dir, max_length=20, device="cpu").max_length == 20
    with pytest.raises(ValueError, match="max_length"):
        start_cross_encoder(bi_encoder_dir, max_length=1000, device="cpu")


def test_pickle_weights_are_refused_without_allow_pickle(tmp_path):
    from safetensors.torch import load_file
    from testdata import build_tiny_bert

    folder = build_tiny_bert(tmp_path / "pickled")
    # What older transformers saved: the same tensors as a pickle.
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="pickle"):
        start_cross_encoder(folder, device="cpu")
    assert start_cross_encoder(folder, allow_pickle=True, device="cpu").num_labels == 1


def test_a_cross_encoder_folder_continues_training(bi_encoder_dir, tmp_path):
    model = start_cross_encoder(bi_encoder_dir, device="cpu")
    saved = model.save(tmp_path / "ce")
    assert is_cross_encoder_folder(saved)
    again = start_cross_encoder(saved, device="cpu")
    pairs = [("the man plays guitar", "a dog runs"), ("sky", "sun")]
    np.testing.assert_allclose(again.predict(pairs), model.predict(pairs), atol=1e-6)


# ---------------------------------------------------------------------- data


def test_scores_are_scaled_into_zero_one_and_out_of_range_refused(toy_file, tmp_path):
    examples = toy_pairs(toy_file)
    assert examples.kind == "scored_pairs" and len(examples) == 96
    assert examples.targets.min() >= 0 and examples.targets.max() <= 1
    bad = write_tsv(tmp_path / "bad.tsv", ("sentence1", "sentence2", "score"), [("a", "b", 1.5)])
    with pytest.raises(DataFileError, match=r"row 1.*1\.5.*\[0, 1\]"):
        load_cross_encoder_pairs(DataSpec(path=str(bad), kind="scored_pairs", score_range=(0, 1)))


def test_labelled_pairs_need_two_labels(tmp_path):
    path = write_tsv(tmp_path / "l.tsv", ("sentence1", "sentence2", "label"), [("a", "b", "1")])
    spec = DataSpec(path=str(path), kind="labelled_pairs", labels=("0", "1"))
    assert load_cross_encoder_pairs(spec).targets.tolist() == [1.0]
    spec = DataSpec(path=str(path), kind="labelled_pairs")  # the NLI labels: three
    with pytest.raises(ValueError, match=r"dev\.labels"):
        load_cross_encoder_pairs(spec, name="dev")
    bad = write_tsv(tmp_path / "b.tsv", ("sentence1", "sentence2", "label"), [("a", "b", "2")])
    with pytest.raises(DataFileError, match="unknown label"):
        load_cross_encoder_pairs(DataSpec(path=str(bad), kind="labelled_pairs", labels=("0", "1")))


def test_other_kinds_and_hard_negatives_are_refused_naming_the_key(toy_file):
    with pytest.raises(ValueError, match=r"train\.kind"):
        load_cross_encoder_pairs(DataSpec(path=str(toy_file), kind="triplets"))
    spec = DataSpec(
        path=str(toy_file),
        kind="duplicate_pairs",
        part="holdout",
        hard_negatives=HardNegativeConfig(mode="mined", vectors="v.npy", vector_ids="i.txt"),
    )
    with pytest.raises(ValueError, match=r"test\.0\.hard_negatives: .*part holdout"):
        load_cross_encoder_pairs(spec, name="test.0")


def test_duplicate_pairs_give_every_labelled_pair_of_the_part(tmp_path):
    # Twelve components of two questions each, every third pair a duplicate.
    rows = [
        (2 * i, 2 * i + 1, f"question {i} a", f"question {i} b", int(i % 3 == 0)) for i in range(12)
    ]
    path = write_tsv(tmp_path / "d.tsv", ("qid1", "qid2", "question1", "question2", "dup"), rows)
    columns = {"id1": "qid1", "id2": "qid2", "sentence1": "question1"}
    columns |= {"sentence2": "question2", "label": "dup"}

    def part(name: str) -> ExampleSet:
        spec = DataSpec(
            path=str(path),
            kind="duplicate_pairs",
            columns=columns,
            part=name,
            holdout_fraction=0.5,
            split_seed=3,
        )
        return load_cross_encoder_pairs(spec)

    train, holdout = part("train"), part("holdout")
    assert len(train) + len(holdout) == len(rows)
    everything = part("all")
    assert sorted(everything.targets.tolist()) == [0.0] * 8 + [1.0] * 4
    assert len(train) and len(holdout)
    trained = set(train.texts[0]) | set(train.texts[1])
    held = set(holdout.texts[0]) | set(holdout.texts[1])
    assert not trained & held  # component-wise: no question in both parts


# ---------------------------------------------------------------------- training


def test_training_reduces_the_loss_and_raises_ap(bi_encoder_dir, toy_file):
    examples = toy_pairs(toy_file)
    torch.manual_seed(0)
    model = start_cross_encoder(bi_encoder_dir, device="cpu")
    evaluator = PairScoreEvaluator(examples, "toy")
    loss_before, ap_before = bce(model, examples), evaluator(model)["ap"]
    result = fit_cross_encoder(model, examples, quick())
    loss_after, metrics = bce(model, examples), evaluator(model)
    assert result.steps == 6 * (96 // 16)
    assert loss_after < 0.5 * loss_before, (loss_before, loss_after)
    assert metrics["ap"] > max(ap_before, 0.95)
    assert result.loss_history[-1][1] < result.loss_history[0][1]
    assert not model.training


def test_bfloat16_autocast_trains_too(bi_encoder_dir, toy_file):
    examples = toy_pairs(toy_file)
    model = start_cross_encoder(bi_encoder_dir, device="cpu")
    before = bce(model, examples)
    fit_cross_encoder(model, examples, quick(precision="bfloat16"))
    assert bce(model, examples) < before


def test_targets_outside_zero_one_and_bad_models_are_refused(bi_encoder_dir, toy_file):
    examples = toy_pairs(toy_file)
    model = start_cross_encoder(bi_encoder_dir, device="cpu")
    bad = ExampleSet("scored_pairs", examples.texts, examples.targets * 5, source="x.tsv")
    with pytest.raises(ValueError, match=r"x.tsv: example \d+ has the target .*\[0, 1\]"):
        fit_cross_encoder(model, bad, quick())
    no_targets = ExampleSet("pairs", examples.texts, source="y.tsv")
    with pytest.raises(ValueError, match=r"y\.tsv"):
        fit_cross_encoder(model, no_targets, quick())


def test_a_dev_set_keeps_the_best_weights(bi_encoder_dir, toy_file, tmp_path):
    examples = toy_pairs(toy_file)
    dev_file = write_tsv(tmp_path / "dev.tsv", ("sentence1", "sentence2", "score"), toy_rows(40, 7))
    evaluator = PairScoreEvaluator(toy_pairs(dev_file), "dev")
    model = start_cross_encoder(bi_encoder_dir, device="cpu")
    result = fit_cross_encoder(model, examples, quick(evaluate_every=3), evaluator=evaluator)
    assert result.primary_metric == "ap"
    assert [entry["step"] for entry in result.dev_history][:2] == [3, 6]
    best = max(entry["ap"] for entry in result.dev_history)
    assert result.best_score == best
    assert evaluator(model)["ap"] == pytest.approx(best, abs=1e-6)


def test_a_killed_run_resumes_to_the_same_weights(bi_encoder_dir, toy_file, tmp_path):
    examples = toy_pairs(toy_file)
    pairs = list(zip(*examples.texts, strict=True))[:12]

    def fresh() -> CrossEncoder:
        torch.manual_seed(5)
        return start_cross_encoder(bi_encoder_dir, device="cpu")

    straight = fresh()
    fit_cross_encoder(straight, examples, quick(epochs=1))

    class Killed(RuntimeError):
        pass

    def kill_after_step_4(progress):
        if progress.step == 4:
            raise Killed

    checkpoints = str(tmp_path / "checkpoints")
    config = quick(epochs=1, checkpoint_every=2, checkpoint_dir=checkpoints)
    with pytest.raises(Killed):
        fit_cross_encoder(fresh(), examples, config, callbacks=[kill_after_step_4])
    resumed_model = fresh()
    result = fit_cross_encoder(resumed_model, examples, config)
    assert result.resumed_from == 4
    assert result.steps == 96 // 16
    np.testing.assert_allclose(
        resumed_model.predict(pairs), straight.predict(pairs), atol=1e-5, rtol=0
    )
    changed = quick(epochs=1, checkpoint_every=2, checkpoint_dir=checkpoints, batch_size=8)
    with pytest.raises(ValueError, match="batch_size"):
        fit_cross_encoder(fresh(), examples, changed)


# ---------------------------------------------------------------------- mined negatives


def test_mined_negatives_skip_the_group_labelled_pairs_and_near_duplicates(tmp_path):
    rows = [
        (1, 2, "q1", "q2", 1),
        (1, 3, "q1", "q3", 0),
        (5, 6, "q5", "q6", 1),
        (7, 8, "q7", "q8", 1),
        (4, 7, "q4", "q7", 0),
    ]
    header = ("qid1", "qid2", "question1", "question2", "dup")
    path = write_tsv(tmp_path / "d.tsv", header, rows)
    # Question 1's neighbours by cosine: 2 (its duplicate), 4 (0.99: above the false-negative
    # bound 0.95 x cos(1, 2)), 3 (labelled with 1 already), then 5, the one to mine.
    vectors = {
        "1": [1, 0, 0, 0],
        "2": [1, 0.1, 0, 0],
        "3": [0.9, 0.43, 0, 0],
        "4": [0.99, 0.14, 0, 0],
        "5": [0.8, 0, 0.6, 0],
        "6": [0, 0, 1, 0],
        "7": [0, 0, 0, 1],
        "8": [0, 0, 0.1, 1],
    }
    np.save(tmp_path / "v.npy", np.asarray(list(vectors.values()), dtype=np.float32))
    (tmp_path / "ids.txt").write_text("\n".join(vectors) + "\n")
    columns = {"id1": "qid1", "id2": "qid2", "sentence1": "question1", "sentence2": "question2"}
    spec = DataSpec(
        path=str(path),
        kind="duplicate_pairs",
        columns={**columns, "label": "dup"},
        part="train",
        holdout_fraction=0.0,
        hard_negatives=HardNegativeConfig(
            mode="mined", vectors=str(tmp_path / "v.npy"), vector_ids=str(tmp_path / "ids.txt")
        ),
    )
    examples = load_cross_encoder_pairs(spec)
    pairs = list(zip(*examples.texts, strict=True))
    assert pairs[:5] == [(f"q{a}", f"q{b}") for a, b, *_ in rows]
    mined = dict(pairs[5:])
    assert examples.targets[5:].tolist() == [0.0] * 3
    assert mined["q1"] == "q5"
    assert mined["q5"] == "q8"  # 1-4 are above 0.95 x cos(5, 6) = 0.57
    labelled = {frozenset((f"q{a}", f"q{b}")) for a, b, *_ in rows}
    assert not any(frozenset(pair) in labelled for pair in mined.items())
    assert mined["q7"] not in ("q7", "q8")

    for mode in ("labelled", "labelled+mined"):
        refused = DataSpec(
            path=str(path), kind="duplicate_pairs", hard_negatives=HardNegativeConfig(mode=mode)
        )
        with pytest.raises(ValueError, match=r"train\.hard_negatives: .*mode mined"):
            load_cross_encoder_pairs(refused)
