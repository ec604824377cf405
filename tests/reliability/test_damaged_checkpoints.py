"""Fine-tuning checkpoints and training data that cannot be trusted.

A checkpoint cut short on disk (its weights or its ``trainer_state.json``) or holding NaN
weights is refused on resume with one line naming the file and what to do; a checkpoint is
verified before a failed run names it as the last good one, and weights gone NaN are never
written as a checkpoint. A training set of one class trains with a warning that the manifest
and the model card keep.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from sbert_pipeline.jobs.cli import main as sbert
from training_examples import build_trainable_model, labelled_pairs, scored_pairs, write_tsv

from sbert_core import SentenceEncoder
from sbert_core.training.checkpoint import latest_checkpoint
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import ExampleSet
from sbert_core.training.loop import TrainingDivergedError, train
from sbert_core.training.losses import CosineSimilarityLoss

# Training sets torch's thread count for the process (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("keep_torch_threads")

QUICK = [
    "training.device=cpu",
    "training.num_threads=1",
    "training.batch_size=8",
    "training.learning_rate=3e-3",
    "training.log_every=4",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_trainable_model(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def sts_train(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sts")
    return write_tsv(folder / "train.tsv", ("sentence1", "sentence2", "score"), scored_pairs(64, 1))


def finetune_argv(model_dir: Path, train_file: Path, output: Path) -> list[str]:
    """A 16-step cosine run with a checkpoint every 5 steps, the newest two kept."""
    return [
        "finetune",
        "--model",
        str(model_dir),
        "--output",
        str(output),
        "objective.name=cosine",
        f"train.path={train_file}",
        *QUICK,
        "training.epochs=2",
        "training.checkpoint_every=5",
        "training.keep_checkpoints=2",
    ]


@pytest.fixture(scope="module")
def left_checkpoints(model_dir, sts_train, tmp_path_factory):
    """The checkpoints (step 10 and 15) a finished run left behind, as a killed run would."""
    output = tmp_path_factory.mktemp("first") / "tuned"
    argv = finetune_argv(model_dir, sts_train, output)
    assert sbert([*argv, "remove_checkpoints=false"]) == 0
    return Path(f"{output}.checkpoints")


@pytest.fixture
def resume(left_checkpoints, model_dir, sts_train, tmp_path, capsys):
    """Damage the newest checkpoint with the given function, run the same job again and
    return (exit status, stderr, the damaged checkpoint folder)."""

    def run(damage) -> tuple[int, str, Path]:
        output = tmp_path / "tuned"
        shutil.copytree(left_checkpoints, f"{output}.checkpoints")
        newest = latest_checkpoint(f"{output}.checkpoints")
        assert newest.name == "step-00000015"
        damage(newest)
        capsys.readouterr()
        status = sbert(finetune_argv(model_dir, sts_train, output))
        return status, capsys.readouterr().err, newest

    return run


def cut_in_half(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def error_line(stderr: str) -> str:
    """The run's one error line (training logs come before it)."""
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("sbert: ")]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors"])
def test_a_cut_short_checkpoint_file_is_named_with_what_to_do(resume, name):
    status, stderr, folder = resume(lambda folder: cut_in_half(folder / name))
    line = error_line(stderr)
    assert status == 2 and line.startswith(f"sbert: error: {folder / name} is damaged (truncated")
    assert f"delete the checkpoint folder {folder} and run again" in line


def test_a_cut_short_trainer_state_names_its_file(resume):
    status, stderr, folder = resume(lambda folder: cut_in_half(folder / "trainer_state.json"))
    line = error_line(stderr)
    assert status == 2 and f"{folder / 'trainer_state.json'} is damaged" in line


def test_a_checkpoint_with_nan_weights_is_refused_not_resumed(resume):
    def poison(folder: Path) -> None:
        weights = load_file(folder / "model.safetensors")
        save_file(
            {k: torch.full_like(v, float("nan")) for k, v in weights.items()},
            folder / "model.safetensors",
        )

    status, stderr, folder = resume(poison)
    line = error_line(stderr)
    assert status == 2 and "last good checkpoint" not in line
    assert f"{folder / 'model.safetensors'} is damaged (NaN or infinite values)" in line


# ------------------------------------------------------------------ the last good checkpoint


def cosine_run(model_dir: Path, checkpoints: Path, **changes) -> tuple[CosineSimilarityLoss, dict]:
    """A loss over the tiny model and the arguments of a 16-step run on 64 scored pairs."""
    first, second, scores = zip(*scored_pairs(64, seed=1), strict=True)
    examples = ExampleSet("scored_pairs", (first, second), np.asarray(scores, np.float32) / 5)
    values = {
        "batch_size": 8,
        "learning_rate": 3e-3,
        "epochs": 2,
        "device": "cpu",
        "num_threads": 1,
        "checkpoint_dir": str(checkpoints),
        "checkpoint_every": 2,
    }
    loss = CosineSimilarityLoss(SentenceEncoder.load(model_dir, device="cpu"))
    return loss, {"examples": examples, "config": TrainingConfig(**{**values, **changes})}


def test_a_checkpoint_damaged_since_it_was_written_is_not_named_good(model_dir, tmp_path):
    loss, run = cosine_run(model_dir, tmp_path / "ckpt", keep_checkpoints=2)

    def damage_step_4_then_diverge(progress):
        if progress.step == 5:
            cut_in_half(tmp_path / "ckpt" / "step-00000004" / "model.safetensors")
            with torch.no_grad():
                loss.model.transformer.embeddings.word_embeddings.weight.fill_(float("nan"))

    with pytest.raises(TrainingDivergedError, match="loss became nan at step 6") as error:
        train(loss, run["examples"], run["config"], callbacks=[damage_step_4_then_diverge])
    assert "step-00000004" not in str(error.value)
    assert f"the last good checkpoint is {tmp_path / 'ckpt' / 'step-00000002'}" in str(error.value)


def test_weights_gone_nan_are_never_written_as_a_checkpoint(model_dir, tmp_path):
    # The pooler is not part of a sentence embedding, so NaN there leaves the loss finite.
    loss, run = cosine_run(model_dir, tmp_path / "ckpt")

    def poison_the_pooler_at_step_5(progress):
        if progress.step == 5:
            with torch.no_grad():
                loss.model.transformer.pooler.dense.weight.fill_(float("nan"))

    with pytest.raises(TrainingDivergedError, match=r"pooler\.dense\.weight.*at step 6") as error:
        train(loss, run["examples"], run["config"], callbacks=[poison_the_pooler_at_step_5])
    good = tmp_path / "ckpt" / "step-00000004"
    assert f"the last good checkpoint is {good}" in str(error.value)
    assert latest_checkpoint(tmp_path / "ckpt") == good


# ------------------------------------------------------------------ one class of training data


def test_a_single_label_training_set_warns_and_is_recorded(model_dir, tmp_path, caplog):
    rows = [(first, second, "entailment") for first, second, _ in labelled_pairs(32, seed=7)]
    train_file = write_tsv(tmp_path / "nli.tsv", ("sentence1", "sentence2", "label"), rows)
    output = tmp_path / "nli-model"
    argv = ["finetune", "--model", str(model_dir), "--output", str(output)]
    argv += ["objective.name=softmax", f"train.path={train_file}", "train.kind=labelled_pairs"]
    with caplog.at_level(logging.WARNING):
        assert sbert([*argv, *QUICK, "training.epochs=1"]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        f"{train_file}: every training example has label 'entailment', so the softmax "
        "objective has only one class" in message
        for message in warnings
    ), warnings
    manifest = json.loads((output / "sbert_manifest.json").read_text())
    assert manifest["training_data"]["train"]["single_target"] == "label 'entailment'"
    card = (output / "README.md").read_text()
    assert "**Warning:** every training example has label 'entailment'" in card


def test_a_duplicates_file_of_positives_only_warns_the_cross_encoder(model_dir, tmp_path, caplog):
    rows = [
        (f"a{i}", f"b{i}", first, second, 1)
        for i, (first, second, _) in enumerate(labelled_pairs(32, seed=9))
    ]
    header = ("id1", "id2", "sentence1", "sentence2", "label")
    train_file = write_tsv(tmp_path / "duplicates.tsv", header, rows)
    output = tmp_path / "cross"
    argv = ["finetune", "--model", str(model_dir), "--output", str(output), "kind=cross_encoder"]
    argv += ["objective.name=binary_cross_entropy", f"train.path={train_file}"]
    with caplog.at_level(logging.WARNING):
        assert sbert([*argv, "train.kind=duplicate_pairs", *QUICK, "training.epochs=1"]) == 0
    assert any(
        f"{train_file}: every training example has target 1, so the binary_cross_entropy"
        in record.getMessage()
        for record in caplog.records
    )
    manifest = json.loads((output / "sbert_manifest.json").read_text())
    assert manifest["training_data"]["train"]["single_target"] == "target 1"


def test_a_cut_short_model_given_as_model_says_what_to_do(model_dir, sts_train, tmp_path, capsys):
    broken = tmp_path / "broken-model"
    shutil.copytree(model_dir, broken)
    cut_in_half(broken / "model.safetensors")
    capsys.readouterr()
    assert sbert(finetune_argv(broken, sts_train, tmp_path / "tuned")) == 2
    line = error_line(capsys.readouterr().err)
    assert line.startswith(f"sbert: error: {broken / 'model.safetensors'}: corrupt safetensors")
    assert line.endswith("truncated or damaged: copy or download the model again")
