"""``sbert finetune`` with ``kind: cross_encoder`` end to end on a tiny model: the saved folder
(sentence-transformers loads it to our scores), the manifest and card metrics, config errors,
refused labels, and ``--print-config`` of the example."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from sbert_pipeline.finetune import Options, run
from sbert_pipeline.finetune.config import resolve_config
from training_examples import build_trainable_model, write_tsv

from sbert_core import CrossEncoder
from sbert_core.errors import DataFileError
from tests.sbert_core.test_cross_encoder_training import toy_rows

ROOT = Path(__file__).resolve().parents[3]
QUICK = {
    "device": "cpu",
    "num_threads": 1,
    "batch_size": 16,
    "learning_rate": 5e-3,
    "epochs": 8,
    "log_every": 1,
    "checkpoint_every": 2,
}
HEADER = ("sentence1", "sentence2", "score")


# Training sets torch's thread count for the process (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_trainable_model(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pairs")
    return {
        split: write_tsv(folder / f"{split}.tsv", HEADER, toy_rows(n, seed))
        for split, n, seed in (("train", 64, 1), ("test", 32, 2))
    }


def write_config(path: Path, model_dir: Path, data: dict, output: Path, **changes) -> Path:
    spec = {"kind": "scored_pairs"}
    config = {
        "kind": "cross_encoder",
        "model": str(model_dir),
        "output": str(output),
        "objective": {"name": "binary_cross_entropy"},
        "train": {"path": str(data["train"]), **spec},
        "test": [{"path": str(data["test"]), **spec}],
        "training": dict(QUICK),
        **changes,
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(model_dir, data, tmp_path_factory) -> tuple[Path, object]:
    folder = tmp_path_factory.mktemp("run")
    output = folder / "ce"
    config = write_config(folder / "train.yaml", model_dir, data, output)
    return output, run(Options(config=str(config)))


def test_the_output_is_a_cross_encoder_sentence_transformers_loads_to_our_scores(trained):
    from sentence_transformers import CrossEncoder as STCrossEncoder

    output, _ = trained
    pairs = [(a, b) for a, b, _ in toy_rows(12, 9)]
    ours = CrossEncoder.load(output, device="cpu").predict(pairs)
    theirs = np.asarray(STCrossEncoder(str(output), device="cpu").predict(pairs), np.float32)
    assert np.ptp(ours) > 0.1, "a trained model spreads the scores"
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=0)
    assert not Path(f"{output}.checkpoints").exists()  # removed once the model is saved


def test_the_manifest_and_card_hold_ap_and_best_f1_before_and_after(trained):
    output, result = trained
    manifest = json.loads((output / "sbert_manifest.json").read_text())
    assert result.manifest == manifest
    assert manifest["kind"] == "cross_encoder" and manifest["num_labels"] == 1
    assert manifest["activation_fn"].endswith("Sigmoid")
    assert manifest["objective"]["name"] == "binary_cross_entropy"
    assert manifest["training"]["steps"] == 8 * (64 // 16)
    assert manifest["training_data"]["train"]["kind"] == "scored_pairs"
    (name,) = manifest["metrics"]["test"]["after"]
    after = manifest["metrics"]["test"]["after"][name]
    before = manifest["metrics"]["test"]["before"][name]
    assert set(after) >= {"ap", "f1", "precision", "recall", "threshold", "n_pairs"}
    assert after["n_pairs"] == 32
    assert after["ap"] > before["ap"] and after["ap"] > 0.9
    assert 0 < after["threshold"] < 1
    card = (output / "README.md").read_text()
    assert "average precision" in card and f"{after['ap']:.4f}" in card
    assert f"{before['ap']:.4f}" in card and f"{after['threshold']:.4f}" in card
    assert "from sentence_transformers import CrossEncoder" in card
    line = result.summary.line()
    assert f"test {name} ap {before['ap']:.4f} -> {after['ap']:.4f}" in line
    assert f"test {name} best f1 {before['f1']:.4f} -> {after['f1']:.4f}" in line


def test_a_killed_run_resumes_from_its_checkpoint(model_dir, data, tmp_path, monkeypatch):
    from sbert_pipeline.finetune import cross_encoder_run

    class Killed(RuntimeError):
        pass

    def kill_at_step_5(progress):
        if progress.step == 5:
            raise Killed

    def killed_fit(*args, callbacks=(), **kwargs):
        return fit(*args, callbacks=[*callbacks, kill_at_step_5], **kwargs)

    fit = cross_encoder_run.fit_cross_encoder
    output = tmp_path / "ce"
    config = write_config(tmp_path / "c.yaml", model_dir, data, output)
    monkeypatch.setattr(cross_encoder_run, "fit_cross_encoder", killed_fit)
    with pytest.raises(Killed):
        run(Options(config=str(config)))
    assert not output.exists()
    assert (Path(f"{output}.checkpoints") / "step-00000004").is_dir()
    monkeypatch.setattr(cross_encoder_run, "fit_cross_encoder", fit)
    result = run(Options(config=str(config)))
    assert (result.summary.resumed_from, result.summary.steps) == (4, 32)
    assert "resumed from step 4" in result.summary.line()
    assert json.loads((output / "sbert_manifest.json").read_text())["training"]["resumed_from"] == 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"objective": {"name": "cosine"}}, "objective.name: kind cross_encoder trains with"),
        ({"kind": "bi_encoder"}, "objective.name: binary_cross_entropy trains a cross-encoder"),
        ({"kind": "cross"}, "kind"),
        ({"dedup_test": {"pairs": {"path": "x"}}}, "dedup_test:"),
    ],
)
def test_config_errors_name_the_key(model_dir, data, tmp_path, changes, message):
    config = write_config(tmp_path / "c.yaml", model_dir, data, tmp_path / "out", **changes)
    with pytest.raises(ValueError, match=message):
        resolve_config(Options(config=str(config)))


def test_a_test_part_that_overlaps_the_training_part_is_refused(model_dir, tmp_path):
    rows = [(1, 2, "the man plays", "a woman plays", 1), (3, 4, "the dog", "a car", 0)]
    header = ("qid1", "qid2", "question1", "question2", "is_duplicate")
    path = str(write_tsv(tmp_path / "qqp.tsv", header, rows))
    columns = {"id1": "qid1", "id2": "qid2", "sentence1": "question1", "sentence2": "question2"}
    columns["label"] = "is_duplicate"
    split = {"holdout_fraction": 0.5, "split_seed": 42}

    def spec(part: str, **changes) -> dict:
        base = {"path": path, "kind": "duplicate_pairs", "columns": dict(columns), "part": part}
        return base | split | changes

    data = {"train": path, "test": path}
    for test, message in (
        (spec("train"), r"test\.0\.part: train of .* overlaps the training part \(train\)"),
        (spec("all"), r"test\.0\.part: all"),
        (spec("holdout", split_seed=7), r"test\.0: splits .* \(0\.5, 7, None\) but train"),
    ):
        config = write_config(
            tmp_path / "c.yaml", model_dir, data, tmp_path / "o", train=spec("train"), test=[test]
        )
        with pytest.raises(ValueError, match=message):
            resolve_config(Options(config=str(config)))
    config = write_config(
        tmp_path / "c.yaml",
        model_dir,
        data,
        tmp_path / "o",
        train=spec("train"),
        test=[spec("holdout")],
    )
    assert resolve_config(Options(config=str(config))).test[0].part == "holdout"


def test_other_data_kinds_are_refused_naming_the_section(model_dir, data, tmp_path):
    test = [{"path": str(data["test"]), "kind": "triplets"}]
    config = write_config(tmp_path / "c.yaml", model_dir, data, tmp_path / "out", test=test)
    with pytest.raises(ValueError, match=r"test\.0\.kind"):
        run(Options(config=str(config)))
    assert not (tmp_path / "out").exists()


def test_scores_outside_zero_one_are_refused_before_training(model_dir, tmp_path):
    bad = write_tsv(tmp_path / "bad.tsv", HEADER, [("a man", "a woman", 0.2), ("sky", "sun", 2)])
    data = {"train": bad, "test": bad}
    train = {"path": str(bad), "kind": "scored_pairs", "score_range": [0, 1]}
    config = write_config(tmp_path / "c.yaml", model_dir, data, tmp_path / "out", train=train)
    with pytest.raises(DataFileError, match=r"bad.tsv: row 2, column 'score': score 2"):
        run(Options(config=str(config)))
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_not_replaced_without_overwrite(model_dir, data, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    config = write_config(tmp_path / "c.yaml", model_dir, data, output)
    with pytest.raises(FileExistsError, match="overwrite"):
        run(Options(config=str(config)))
    assert (output / "keep.txt").read_text() == "mine"


def test_print_config_of_the_example_trains_nothing(monkeypatch, capsys):
    from sbert_pipeline.jobs import stage_cli

    monkeypatch.chdir(ROOT)
    assert stage_cli.main(
        "finetune", ["--config", "examples/cross_encoder_qqp.yaml", "--print-config"]
    ) in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["kind"] == "cross_encoder"
    assert printed["objective"]["name"] == "binary_cross_entropy"
    assert printed["train"]["part"] == "train" and printed["test"][0]["part"] == "holdout"
    for spec in (printed["train"], printed["test"][0]):
        assert (spec["holdout_fraction"], spec["split_seed"]) == (0.08, 42)
    assert printed["output"] == "runs/minilm-qqp-cross-encoder"
