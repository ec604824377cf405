"""``sbert finetune``'s step progress (both model kinds), a cross-encoder trained only on the
pairs in a bi-encoder cosine band, and ``precision: auto``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from sbert_pipeline.finetune import Options, run
from sbert_pipeline.finetune.config import resolve_config
from sbert_pipeline.vectors.progress import enable_progress
from training_examples import build_trainable_model, write_tsv

from sbert_core import SentenceEncoder
from sbert_core.inference.cpu_features import CpuFeatures
from sbert_core.training.cosine_band import CosineBand
from sbert_core.training.cross_encoder_data import keep_in_band
from sbert_core.training.data import ExampleSet
from sbert_core.training.step_loop import autocast_dtype_for, resolve_precision
from tests.sbert_core.test_cross_encoder_training import toy_rows

HEADER = ("sentence1", "sentence2", "score")
QUICK = {
    "device": "cpu",
    "num_threads": 1,
    "batch_size": 16,
    "learning_rate": 5e-3,
    "epochs": 2,
    "log_every": 1,
    "checkpoint_every": 0,
}
STEP_LINE = re.compile(r"^finetune: (\d+)/(\d+) steps \([\d.]+%\), [\d.,]+ steps/s", re.M)

pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_trainable_model(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def train_file(tmp_path_factory) -> Path:
    return write_tsv(tmp_path_factory.mktemp("pairs") / "train.tsv", HEADER, toy_rows(64, 1))


@pytest.fixture
def plain_lines_every_update(monkeypatch):
    """Progress on, a plain line on stderr at every update (no 30 s wait)."""
    monkeypatch.setattr(
        "sbert_pipeline.finetune.progress.show_progress_unless_quiet",
        lambda here=True: enable_progress(here, interval=0),
    )
    yield
    enable_progress(False)


def write_config(path: Path, model: Path, train: Path, output: Path, **changes) -> Path:
    config = {
        "kind": "cross_encoder",
        "model": str(model),
        "output": str(output),
        "objective": {"name": "binary_cross_entropy"},
        "train": {"path": str(train), "kind": "scored_pairs"},
        "evaluate_base_model": False,
        "training": dict(QUICK),
        **changes,
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_a_cross_encoder_finetune_shows_steps_loss_and_eta_on_stderr(
    model_dir, train_file, tmp_path, capsys, caplog, plain_lines_every_update
):
    config = write_config(tmp_path / "ce.yaml", model_dir, train_file, tmp_path / "ce")
    run(Options(config=str(config)))
    err = capsys.readouterr().err
    steps = [(int(done), int(total)) for done, total in STEP_LINE.findall(err)]
    assert steps == [(k, 8) for k in range(1, 9)], err  # 2 epochs of 64 pairs, batch 16
    assert all("ETA" in line for line in err.splitlines() if line.startswith("finetune:"))
    # The loop's own lines (logged: on stderr from the command line) carry the loss.
    assert re.search(r"step 8/8 \(epoch 2\) loss [\d.]+ lr .* s/step, ETA", caplog.text)


def test_a_bi_encoder_finetune_shows_its_steps_too(
    tmp_path, tiny_st_dir, capsys, plain_lines_every_update
):
    rows = [(f"text number {i}", f"the text number {i}", 1.0 if i % 2 else 0.0) for i in range(32)]
    train = write_tsv(tmp_path / "sts.tsv", HEADER, rows)
    config = {
        "model": str(tiny_st_dir),
        "output": str(tmp_path / "bi"),
        "objective": {"name": "cosine"},
        "train": {"path": str(train), "kind": "scored_pairs", "score_range": [0, 1]},
        "evaluate_base_model": False,
        "training": dict(QUICK, epochs=1),
    }
    path = tmp_path / "bi.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    run(Options(config=str(path)))
    steps = [(int(d), int(t)) for d, t in STEP_LINE.findall(capsys.readouterr().err)]
    assert steps == [(k, 2) for k in range(1, 3)]


class FixedVectors:
    """An encoder whose vector of a text is given: the cosines are known exactly."""

    def __init__(self, vectors: dict[str, np.ndarray]) -> None:
        self.vectors = vectors
        self.calls: list[int] = []

    def encode(self, texts, **_options) -> np.ndarray:
        self.calls.append(len(texts))
        rows = np.stack([self.vectors[text] for text in texts]).astype(np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_keep_in_band_keeps_the_pairs_whose_cosine_lies_in_the_band():
    angle = {"a": 0.0, "b": 0.3, "c": 0.7, "d": 1.2}  # cos(b-a)=0.955, cos(c-a)=0.765 ...
    vectors = {t: np.array([np.cos(x), np.sin(x)]) for t, x in angle.items()}
    texts = (("a", "a", "a", "b", "c"), ("b", "c", "d", "c", "d"))
    targets = np.array([1, 0, 0, 1, 0], np.float32)
    examples = ExampleSet("scored_pairs", texts, targets, source="toy")
    encoder = FixedVectors(vectors)
    done: list[int] = []
    kept = keep_in_band(examples, CosineBand(low=0.8), encoder, progress=done.append)
    cosines = [np.cos(angle[x] - angle[y]) for x, y in zip(*texts, strict=True)]
    expected = [i for i, c in enumerate(cosines) if c >= 0.8]
    assert kept.texts == tuple(tuple(col[i] for i in expected) for col in texts)
    assert kept.targets.tolist() == targets[expected].tolist()
    assert sum(done) == 4 and encoder.calls == [4]  # every distinct text embedded once
    upper = keep_in_band(examples, CosineBand(low=0.5, high=0.9), encoder)
    assert len(upper) == sum(0.5 <= c < 0.9 for c in cosines)
    with pytest.raises(ValueError, match=r"train.cosine_band: no pair of toy .* \[0.999, 1\]"):
        keep_in_band(examples, CosineBand(low=0.999), encoder)


def test_a_cross_encoder_trains_only_on_the_pairs_in_the_band(
    model_dir, train_file, tiny_st_dir, tmp_path
):
    rows = toy_rows(64, 1)
    encoder = SentenceEncoder.load(tiny_st_dir, device="cpu")
    a = encoder.encode([r[0] for r in rows], normalize_embeddings=True)
    b = encoder.encode([r[1] for r in rows], normalize_embeddings=True)
    cosines = np.sort(np.einsum("ij,ij->i", a, b))
    low = float((cosines[31] + cosines[32]) / 2)  # half of the pairs
    band = {"model": str(tiny_st_dir), "low": low}
    output = tmp_path / "ce"
    config = write_config(tmp_path / "ce.yaml", model_dir, train_file, output)
    text = yaml.safe_load(config.read_text())
    text["train"]["cosine_band"] = band
    config.write_text(yaml.safe_dump(text), encoding="utf-8")
    result = run(Options(config=str(config)))
    manifest = json.loads((output / "sbert_manifest.json").read_text())
    assert manifest["training_data"]["train"]["examples"] == 32
    no_vectors = {"vectors": None, "vector_ids": None}  # the texts were embedded
    assert manifest["config"]["train"]["cosine_band"] == {**band, "high": None, **no_vectors}
    assert manifest["training"]["steps"] == 2 * 2  # 32 pairs, batch 16, 2 epochs
    assert result.summary.steps == 4


def test_a_cosine_band_is_refused_for_a_bi_encoder_and_outside_minus_one_one(tmp_path):
    train = write_tsv(tmp_path / "t.tsv", HEADER, [("a", "b", 1.0)])
    base = {"output": str(tmp_path / "o"), "train": {"path": str(train)}}
    cases = [
        ({**base, "train": {**base["train"], "cosine_band": {"low": 0.8}}}, "kind: cross_encoder"),
        (
            {
                **base,
                "kind": "cross_encoder",
                "objective": {"name": "binary_cross_entropy"},
                "train": {**base["train"], "cosine_band": {"low": 0.8, "high": 0.5}},
            },
            r"train.cosine_band.high must lie in \(0.8, 1\], got 0.5",
        ),
    ]
    for config, message in cases:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            resolve_config(Options(config=str(path)))


@pytest.mark.parametrize(("flags", "expected"), [({"amx_bf16"}, "bfloat16"), ({"avx2"}, "float32")])
def test_precision_auto_is_bf16_only_where_the_cpu_has_it(monkeypatch, flags, expected):
    features = CpuFeatures(flags=frozenset(flags), torch_capability="AVX512")
    monkeypatch.setattr("sbert_core.inference.cpu_features.detect_cpu_features", lambda: features)
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == expected
    assert resolve_precision("float32", cpu) == "float32"
    dtype = autocast_dtype_for("auto", cpu)
    assert dtype == (torch.bfloat16 if expected == "bfloat16" else None)


def test_the_quick_recipe_trains_on_the_band_the_quickstart_verify_job_scores(monkeypatch, capsys):
    """examples/cross_encoder_qqp_quick.yaml: the full recipe's split, a band of
    quickstart_verify.yaml's model that its verify scores whole (the job's pairs threshold is at
    or below the band's low edge: 0.75 scored best on the Quora holdout with a model trained
    from 0.8) and the folder its verify reads."""
    from sbert_pipeline.jobs import stage_cli

    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(root)
    argv = ["--config", "examples/cross_encoder_qqp_quick.yaml", "--print-config"]
    assert stage_cli.main("finetune", argv) in (0, None)
    quick = yaml.safe_load(capsys.readouterr().out)
    full = yaml.safe_load((root / "examples/cross_encoder_qqp.yaml").read_text())
    job = yaml.safe_load((root / "examples/quickstart_verify.yaml").read_text())
    assert quick["train"]["cosine_band"] == {
        "model": job["model"],
        "low": 0.8,
        "high": None,
        "vectors": None,
        "vector_ids": None,
    }
    assert job["pairs"]["threshold"] <= quick["train"]["cosine_band"]["low"]
    assert quick["output"] == job["verify"]["model"] == full["output"]
    assert quick["training"]["precision"] == "auto"
    for key in ("path", "part", "holdout_fraction", "split_seed", "columns"):
        assert quick["train"][key] == full["train"][key]
        assert quick["test"][0][key] == full["test"][0][key]
