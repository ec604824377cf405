"""``sbert finetune`` end to end on a tiny model: artifact, manifest, model card, errors, DDP."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from sbert_pipeline.finetune import Options
from sbert_pipeline.finetune.config import resolve_config
from sbert_pipeline.finetune.stage import CLASSIFIER_FILE
from sbert_pipeline.jobs import stage_cli
from training_examples import build_trainable_model, labelled_pairs, scored_pairs, write_tsv

from sbert_core import SentenceEncoder
from sbert_core.errors import DataFileError
from tests.stage_commands import finetune

ROOT = Path(__file__).resolve().parents[2]
QUICK = [
    "training.device=cpu",
    "training.num_threads=1",
    "training.batch_size=8",
    "training.learning_rate=3e-3",
    "training.log_every=1",
]


# Training sets torch's thread count for the process (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_trainable_model(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def sts_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sts")
    header = ("sentence1", "sentence2", "score")
    return {
        split: write_tsv(folder / f"{split}.tsv", header, scored_pairs(n, seed))
        for split, n, seed in (("train", 64, 1), ("dev", 40, 2), ("test", 40, 3))
    }


def sts_config(path, model_dir, sts_files, output):
    config = {
        "model": str(model_dir),
        "output": str(output),
        "objective": {"name": "cosine"},
        "train": {"path": str(sts_files["train"])},
        "dev": {"path": str(sts_files["dev"])},
        "test": [{"path": str(sts_files["test"])}],
        "training": {"epochs": 2, "evaluate_every": 4, "checkpoint_every": 3},
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_finetune_writes_a_model_both_libraries_load(tmp_path, model_dir, sts_files):
    output = tmp_path / "tuned"
    config = sts_config(tmp_path / "train.yaml", model_dir, sts_files, output)
    summary = finetune(["--config", str(config), *QUICK])

    assert summary.steps == 16 and summary.output == str(output)
    test_name = f"{sts_files['test'].parent.name}/test.tsv"
    scores = summary.test_metrics[test_name]
    assert scores["metric"] == "cosine_spearman" and scores["after"] > scores["before"] + 20
    assert f"test {test_name} cosine_spearman" in summary.line() and summary.line().endswith(
        str(output)
    )
    assert not Path(f"{output}.checkpoints").exists()

    manifest = json.loads((output / "sbert_manifest.json").read_text())
    train_data = manifest["training_data"]["train"]
    assert train_data["sha256"] == hashlib.sha256(sts_files["train"].read_bytes()).hexdigest()
    assert (
        train_data["examples"] == 64 and manifest["training_data"]["dev"]["kind"] == "scored_pairs"
    )
    assert manifest["base_model"]["model_id"] == str(model_dir.resolve())
    assert manifest["config"]["training"]["batch_size"] == 8
    assert manifest["metrics"]["dev"]["best_step"] in (4, 8, 12, 16)
    assert manifest["metrics"]["test"]["after"][test_name]["cosine_spearman"] == scores["after"]
    assert {"torch", "transformers", "sbert_pipeline"} <= set(manifest["software"])
    card = (output / "README.md").read_text()
    assert (
        "base_model: " + str(model_dir.resolve()) in card
        and f"| {test_name} | cosine_spearman |" in card
    )

    from sentence_transformers import SentenceTransformer

    texts = ["a man plays the guitar", "the dog runs in the rain", "green trees and sun"]
    ours = SentenceEncoder.load(output, device="cpu").encode(texts)
    theirs = SentenceTransformer(str(output), device="cpu").encode(texts)
    assert np.abs(ours - theirs).max() <= 1e-5
    base = SentenceEncoder.load(model_dir, device="cpu").encode(texts)
    assert np.abs(ours - base).max() > 1e-3


def test_softmax_objective_saves_its_classifier(tmp_path, model_dir, sts_files):
    train = write_tsv(
        tmp_path / "nli.tsv", ("sentence1", "sentence2", "label"), labelled_pairs(64, seed=7)
    )
    test = write_tsv(
        tmp_path / "nli_test.tsv", ("sentence1", "sentence2", "label"), labelled_pairs(40, seed=8)
    )
    output = tmp_path / "nli-model"
    summary = finetune(
        [
            "--model",
            str(model_dir),
            "--output",
            str(output),
            "objective.name=softmax",
            f"train.path={train}",
            "train.kind=labelled_pairs",
            f"test.0.path={test}",
            "test.0.kind=labelled_pairs",
            f"test.1.path={sts_files['test']}",
            "training.epochs=6",
            *QUICK,
            "training.learning_rate=1e-2",
        ]
    )
    accuracy = summary.test_metrics[f"{tmp_path.name}/nli_test.tsv"]
    assert accuracy["metric"] == "accuracy" and accuracy["after"] >= 70 > accuracy["before"]
    from safetensors.torch import load_file

    head = load_file(output / CLASSIFIER_FILE)
    assert head["weight"].shape == (3, 3 * 32)


def test_bad_data_fails_before_training_and_writes_nothing(tmp_path, model_dir, sts_files):
    bad = write_tsv(
        tmp_path / "bad.tsv", ("sentence1", "sentence2", "label"), [("a", "b", "entailment")] * 3
    )
    good = write_tsv(
        tmp_path / "good.tsv", ("sentence1", "sentence2", "label"), [("a", "b", "neutral")]
    )
    bad.write_text(bad.read_text() + "c\td\tmaybe\n")
    output = tmp_path / "never"
    argv = ["--model", "/no/such/model", "--output", str(output), f"train.path={bad}"]
    with pytest.raises(DataFileError, match=r"bad\.tsv: row 4, column 'label': unknown label"):
        finetune([*argv, "train.kind=labelled_pairs", "objective.name=softmax"])
    with pytest.raises(ValueError, match="the cosine loss trains on scored_pairs, not labelled"):
        finetune([*argv, "train.kind=labelled_pairs"])
    with pytest.raises(ValueError, match="labelled pairs are scored by the softmax classifier"):
        finetune(
            [
                "--model",
                str(model_dir),
                "--output",
                str(output),
                f"train.path={sts_files['train']}",
                f"test.0.path={good}",
                "test.0.kind=labelled_pairs",
                *QUICK,
            ]
        )
    assert not output.exists() and not Path(f"{output}.checkpoints").exists()
    output.mkdir()
    (output / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="--overwrite"):
        finetune(["--output", str(output), f"train.path={sts_files['train']}"])


def test_print_config_resolves_file_overrides_and_flags(tmp_path, capsys, sts_files, model_dir):
    config = sts_config(tmp_path / "train.yaml", model_dir, sts_files, tmp_path / "out")
    argv = ["--config", str(config), "--print-config", "--no-resume", "training.epochs=3"]
    assert stage_cli.main("finetune", [*argv, "--output", str(tmp_path / "other")]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["training"]["epochs"] == 3 and printed["training"]["resume"] is False
    assert printed["output"] == str(tmp_path / "other")
    assert printed["training"]["checkpoint_dir"] == f"{tmp_path / 'other'}.checkpoints"
    with pytest.raises(ValueError, match=r"unknown config key\(s\) 'training.epoch'"):
        stage_cli.main("finetune", ["--config", str(config), "--print-config", "training.epoch=3"])


def test_example_stsb_config_is_the_paper_recipe():
    config = resolve_config(Options(config=str(ROOT / "examples/finetune_stsb.yaml")))
    assert config.model == "all-MiniLM-L6-v2" and config.objective.name == "cosine"
    training = config.training
    assert (training.batch_size, training.learning_rate, training.warmup_ratio) == (16, 2e-5, 0.1)
    assert training.epochs == 4 and training.pooling == "mean"
    assert config.train.path == "../shared/data/stsb/train.tsv.gz"


def test_torchrun_two_processes_match_one(tmp_path, sts_files):
    """DDP through the real launcher: 2 gloo processes, same global batch, same weights."""
    model = build_trainable_model(tmp_path / "still", dropout=False)
    common = [
        "--model",
        str(model),
        f"train.path={sts_files['train']}",
        "train.limit=44",  # batches of 8: the last one (4 examples) splits 2 + 2
        "evaluate_base_model=false",
        *QUICK,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    ddp = tmp_path / "ddp"
    command = ["-m", "sbert_pipeline.jobs.cli", "finetune", "--output", str(ddp), *common]
    result = subprocess.run(
        [*launcher, "--nproc_per_node=2", *command],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("trained 6 steps") == 1  # only the main process reports
    finetune(["--output", str(tmp_path / "single"), *common])

    from safetensors.torch import load_file

    ddp = load_file(tmp_path / "ddp" / "model.safetensors")
    single = load_file(tmp_path / "single" / "model.safetensors")
    assert max(float((ddp[k] - single[k]).abs().max()) for k in single) <= 1e-5
    manifest = json.loads((tmp_path / "ddp" / "sbert_manifest.json").read_text())
    assert manifest["training"]["world_size"] == 2
