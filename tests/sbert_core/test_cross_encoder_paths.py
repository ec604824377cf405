"""The cross-encoder's compute paths (bf16, int8, OpenVINO): scores close to float32's, the path
that ran described and in the identity, and the bi-encoder's refusals.

The numbers are checked on every machine: as in test_int8.py and test_openvino_path.py, the
CPU check is handed a CPU with native bf16 and VNNI where the machine lacks them (torch's and
OpenVINO's kernels also run, slowly, without them); the refusals are tested with CPUs that lack
them. The tiny random classifiers are test_cross_encoder.py's, their heads wide enough that
scores spread over about 0.3-0.6, so a broken path (scores shuffled, token types dropped, a
constant) falls far outside the bounds below.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from test_cross_encoder import LONG_PAIRS, PAIRS, architecture_folder

from sbert_core import CrossEncoder
from sbert_core.inference.compute_paths import INT8_QUANTIZER, resolve_compute_path
from sbert_core.inference.cpu_features import CpuFeatures
from sbert_core.inference.cross_encoder_paths import (
    calibration_pairs,
    pad_pairs,
    padded_pair_batches,
)
from sbert_core.inference.openvino_path import OPENVINO_INT8_QUANTIZER, OpenVINOTransformer

CPU = torch.device("cpu")
MATRIX_CPU = CpuFeatures(frozenset({"avx512_bf16", "avx512_vnni"}), "AVX512 (assumed by the test)")
PLAIN_CPU = CpuFeatures(frozenset({"avx2"}), "AVX2")
_WORDS = (
    "the a man woman dog cat plays eats runs on road music guitar food red blue car sky sun "
    "rain house tree green how why what is do you"
).split()


def _random_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)

    def text() -> str:
        return " ".join(rng.choice(_WORDS, rng.integers(2, 12)))

    return [(text(), text()) for _ in range(n)]


SCORED = PAIRS + LONG_PAIRS + _random_pairs(40)
# (max |score - float32 score|, min Spearman with the float32 scores) per path. Measured on
# these models: torch bf16 2e-3 / 0.9997 (BERT), torch int8 1e-2 / 0.997, OpenVINO int8
# 6e-2 / 0.93 (static int8 of a random 2-layer model calibrated on texts its tiny vocabulary
# mostly cannot spell); OpenVINO bf16 runs float32 products on CPUs without native bf16.
BOUNDS = {
    ("bfloat16", "torch"): (0.02, 0.99),
    ("int8", "torch"): (0.05, 0.97),
    ("float32", "openvino"): (2e-5, 0.9999),
    ("bfloat16", "openvino"): (0.02, 0.99),
    ("int8", "openvino"): (0.2, 0.85),
}


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    """BERT: token type ids go into the classifier."""
    return architecture_folder("bert", tmp_path_factory.mktemp("bert_ce"))


@pytest.fixture(scope="module")
def exact(bert_dir) -> np.ndarray:
    return CrossEncoder.load(bert_dir, device="cpu").predict(SCORED)


@pytest.fixture(scope="module")
def openvino_fp32(bert_dir) -> CrossEncoder:
    """The OpenVINO float32 model, loaded from a path resolved beforehand (as the verify
    stage's launcher may hand one on)."""
    return CrossEncoder.load(
        bert_dir, device="cpu", dtype=resolve_compute_path("float32", CPU, "openvino")
    )


@pytest.fixture
def matrix_cpu(monkeypatch):
    monkeypatch.setattr(
        "sbert_core.inference.compute_paths.detect_cpu_features", lambda: MATRIX_CPU
    )


def _check_close(scores: np.ndarray, exact: np.ndarray, dtype: str, backend: str) -> None:
    largest, rank = BOUNDS[(dtype, backend)]
    assert scores.shape == exact.shape and scores.dtype == np.float32
    assert np.abs(scores - exact).max() <= largest
    assert spearmanr(scores, exact)[0] >= rank


@pytest.mark.parametrize(
    ("dtype", "backend"),
    [("bfloat16", "torch"), ("int8", "torch"), ("float32", "openvino"), ("bfloat16", "openvino")],
)
def test_each_path_scores_close_to_float32(bert_dir, exact, dtype, backend, matrix_cpu):
    assert np.ptp(exact) > 0.1, "scores should spread, or the comparison proves little"
    model = CrossEncoder.load(
        bert_dir,
        device="cpu",
        dtype=dtype,
        backend=backend,
        allow_pickle=False,
        max_length=None,
        num_threads=None,
    )
    scores = model.predict(SCORED, batch_size=7, show_progress_bar=False)
    _check_close(scores, exact, dtype, backend)
    if (dtype, backend) in (("bfloat16", "torch"), ("int8", "torch")):
        # The path really ran: rounded or quantized products do not give float32's scores.
        assert np.abs(scores - exact).max() > 1e-5
    assert isinstance(model.model, OpenVINOTransformer) == (backend == "openvino")
    description = model.describe()
    assert description["dtype"] == dtype
    assert description["compute"]["path"] == dtype
    assert description["compute"]["backend"] == backend
    assert description["compute"]["cpu_features"] == MATRIX_CPU.as_dict()


def test_openvino_int8_is_close_calibrated_on_fixed_pairs_and_the_same_twice(
    bert_dir, exact, matrix_cpu
):
    first, second = (
        CrossEncoder.load(bert_dir, device="cpu", dtype="int8", backend="openvino")
        for _ in range(2)
    )
    scores = first.predict(SCORED)
    _check_close(scores, exact, "int8", "openvino")
    assert np.abs(scores - exact).max() > 1e-4, "the weights really were quantized"
    # Calibrated on the same pairs, two workers quantize the same way: the same scores.
    np.testing.assert_array_equal(second.predict(SCORED), scores)
    compute = first.describe()["compute"]
    assert compute["quantizer"] == OPENVINO_INT8_QUANTIZER and compute["backend_version"]


def test_calibration_pairs_are_padded_as_predict_pads_them(bert_dir):
    model = CrossEncoder.load(bert_dir, device="cpu")
    pairs = calibration_pairs()
    assert len(pairs) == 300 and pairs[-1][1] == pairs[0][0]
    batches = padded_pair_batches(model, pairs, batch_size=16)
    assert sum(len(batch["input_ids"]) for batch in batches) == 300
    assert all(set(batch) == {"input_ids", "attention_mask", "token_type_ids"} for batch in batches)
    assert max(batch["input_ids"].shape[1] for batch in batches) <= model.max_length
    # A pair's second text is of type 1 (BERT), padding of type 0.
    batch = batches[0]
    assert batch["token_type_ids"].max() == 1
    assert (batch["token_type_ids"][batch["attention_mask"] == 0] == 0).all()
    features, _ = model.tokenize(pairs[:3])
    padded = pad_pairs(model, features, [2, 0])
    assert (
        padded["input_ids"][0, : len(features["input_ids"][2])].tolist()
        == (features["input_ids"][2])
    )


def test_openvino_without_token_types_matches_torch(tmp_path):
    # DistilBERT's forward takes no token type ids: the converted model has no such input.
    folder = architecture_folder("distilbert", tmp_path)
    exact = CrossEncoder.load(folder, device="cpu").predict(SCORED)
    model = CrossEncoder.load(folder, device="cpu", backend="openvino")
    assert "token_type_ids" not in model.model._inputs
    _check_close(model.predict(SCORED, batch_size=5), exact, "float32", "openvino")


def test_identity_changes_with_the_dtype_and_the_backend(bert_dir, openvino_fp32, matrix_cpu):
    float32 = CrossEncoder.load(bert_dir, device="cpu")
    assert "backend" not in float32.settings(), "torch float32 identities stay as they were"
    assert CrossEncoder.load(bert_dir, device="cpu", dtype=torch.float32).identity == (
        float32.identity
    )
    others = {
        (dtype, "torch"): CrossEncoder.load(bert_dir, device="cpu", dtype=dtype)
        for dtype in ("bfloat16", "int8")
    }
    others[("float32", "openvino")] = openvino_fp32
    identities = {float32.identity} | {model.identity for model in others.values()}
    assert len(identities) == 4
    assert others[("float32", "openvino")].settings()["backend"] == "openvino"
    int8 = others[("int8", "torch")].describe()
    assert int8["compute"]["quantizer"] == INT8_QUANTIZER
    assert int8["compute"]["engine"] in ("x86", "fbgemm")
    assert int8["identity"] == others[("int8", "torch")].identity


def test_a_resolved_path_is_taken_as_the_dtype(openvino_fp32, exact):
    assert openvino_fp32.compute_path.backend == "openvino"
    assert isinstance(openvino_fp32.model, OpenVINOTransformer)
    _check_close(openvino_fp32.predict(SCORED), exact, "float32", "openvino")


def test_auto_takes_bfloat16_only_where_the_cpu_has_it(bert_dir):
    from sbert_core.inference.precision import cpu_has_fast_bf16

    model = CrossEncoder.load(bert_dir, device="cpu", dtype="auto")
    assert model.describe()["dtype"] == ("bfloat16" if cpu_has_fast_bf16() else "float32")


@pytest.mark.parametrize(
    ("dtype", "backend", "device", "features", "message"),
    [
        ("int8", "torch", "cpu", PLAIN_CPU, r"int8 dot-product instructions.*avx2"),
        ("int8", "torch", "cuda", MATRIX_CPU, "int8 runs on CPU only"),
        ("float16", "torch", "cpu", MATRIX_CPU, "float16 needs a CUDA device"),
        ("half", "torch", "cpu", MATRIX_CPU, "unknown dtype 'half'"),
        ("bfloat16", "openvino", "cpu", PLAIN_CPU, "needs native bf16"),
        ("int8", "openvino", "cpu", PLAIN_CPU, "int8 dot-product instructions"),
        ("float32", "openvino", "cuda", MATRIX_CPU, "runs on CPU only"),
        ("float32", "onnx", "cpu", MATRIX_CPU, "unknown --cpu-backend 'onnx'; valid: torch"),
    ],
)
def test_paths_this_machine_cannot_run_are_refused_before_loading(
    dtype, backend, device, features, message, monkeypatch, tmp_path
):
    monkeypatch.setattr("sbert_core.inference.compute_paths.detect_cpu_features", lambda: features)
    # The refusal comes before the model is read: this folder does not exist.
    with pytest.raises(ValueError, match=message):
        CrossEncoder.load(tmp_path / "absent", device=device, dtype=dtype, backend=backend)


def test_openvino_is_refused_with_advice_when_not_installed(bert_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino raises ImportError
    with pytest.raises(ValueError, match=r"pip install 'sbert-pipeline\[openvino\]'"):
        CrossEncoder.load(bert_dir, device="cpu", backend="openvino")


def test_saving_is_refused_off_the_float32_torch_path(bert_dir, tmp_path):
    model = CrossEncoder.load(bert_dir, device="cpu", dtype="bfloat16")
    with pytest.raises(ValueError, match="runs bfloat16 on torch; load it with dtype='float32'"):
        model.save(tmp_path / "saved")
    assert not (tmp_path / "saved").exists()


def test_training_through_openvino_is_refused(openvino_fp32):
    features, _ = openvino_fp32.tokenize(PAIRS[:2])
    openvino_fp32.train()
    try:
        with pytest.raises(RuntimeError, match="inference only; train with --cpu-backend torch"):
            openvino_fp32(**pad_pairs(openvino_fp32, features, [0, 1]))
    finally:
        openvino_fp32.eval()
