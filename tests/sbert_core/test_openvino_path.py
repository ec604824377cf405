"""The OpenVINO CPU backend: same vectors as torch (float32), close in bf16/int8, recorded in the
description, refused clearly where it cannot run."""

import argparse
import sys

import numpy as np
import pytest
import torch
from sbert_pipeline.jobs.model_flags import add_model_arguments, settings_from_flags
from sbert_pipeline.stage_api.model_options import CPU_BACKEND_CHOICES

from sbert_core import SentenceEncoder
from sbert_core.inference.calibration_texts import CALIBRATION_TEXTS
from sbert_core.inference.compute_paths import (
    BACKENDS,
    openvino_compute_path,
    prepare_transformer,
    resolve_compute_path,
)
from sbert_core.inference.cpu_features import CpuFeatures
from sbert_core.inference.encoder_settings import EncoderSettings
from sbert_core.inference.openvino_path import (
    OPENVINO_INT8_QUANTIZER,
    OpenVINOTransformer,
    calibration_batches,
)
from sbert_core.model.info import inspect_model, load_transformer

CPU = torch.device("cpu")
# What the bf16 and int8 paths need; the tests hand it to the path check on every machine, as
# the plugin runs both (slowly) without them: the numbers are tested everywhere, the refusals
# in the tests that give a CPU without them.
MATRIX_CPU = CpuFeatures(frozenset({"avx512_bf16", "avx512_vnni"}), "AVX512 (assumed by the test)")


@pytest.fixture
def matrix_cpu(monkeypatch):
    monkeypatch.setattr(
        "sbert_core.inference.compute_paths.detect_cpu_features", lambda: MATRIX_CPU
    )


def _load(model_dir, dtype: str) -> SentenceEncoder:
    return SentenceEncoder.load(
        model_dir, device="cpu", dtype=resolve_compute_path(dtype, CPU, "openvino")
    )


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_backend_choices_are_the_compute_paths_backends():
    assert CPU_BACKEND_CHOICES == BACKENDS


def test_float32_gives_torchs_vectors(tiny_st_dir, tiny_encoder, sample_texts):
    encoder = _load(tiny_st_dir, "float32")
    assert isinstance(encoder.transformer, OpenVINOTransformer)
    np.testing.assert_allclose(
        encoder.encode(sample_texts), tiny_encoder.encode(sample_texts), atol=2e-5
    )
    compute = encoder.describe()["compute"]
    assert compute["backend"] == "openvino" and compute["path"] == "float32"
    assert compute["backend_version"] and "quantizer" not in compute


def test_torch_paths_name_their_backend(tiny_encoder):
    assert tiny_encoder.describe()["compute"]["backend"] == "torch"


def test_bfloat16_and_int8_stay_close_to_float32(
    tiny_st_dir, tiny_encoder, sample_texts, matrix_cpu
):
    exact = tiny_encoder.encode(sample_texts)
    bf16 = _load(tiny_st_dir, "bfloat16")
    assert bf16.describe()["dtype"] == "bfloat16"
    assert _cosines(bf16.encode(sample_texts), exact).min() > 0.99
    int8 = _load(tiny_st_dir, "int8")
    quantized = int8.encode(sample_texts)
    assert _cosines(quantized, exact).min() > 0.99
    # The weights really were quantized: the vectors are not the float32 ones.
    assert np.abs(quantized - exact).max() > 1e-4
    description = int8.describe()
    assert description["dtype"] == "int8"
    assert description["compute"]["quantizer"] == OPENVINO_INT8_QUANTIZER


def test_int8_calibrates_on_the_fixed_texts_and_loads_the_same_twice(
    tiny_st_dir, sample_texts, matrix_cpu
):
    info = inspect_model(tiny_st_dir)
    batches = calibration_batches(info)
    assert sum(len(batch["input_ids"]) for batch in batches) == len(CALIBRATION_TEXTS) == 300
    assert max(batch["input_ids"].shape[1] for batch in batches) <= info.max_seq_length
    # Calibrated on the same texts, two workers quantize the same way: the same vectors.
    first, second = (_load(tiny_st_dir, "int8").encode(sample_texts) for _ in range(2))
    np.testing.assert_array_equal(first, second)
    with pytest.raises(ValueError, match="needs the model's tokenizer to calibrate"):
        prepare_transformer(
            load_transformer(info, torch.float32), openvino_compute_path("int8", CPU)
        )


def test_a_batch_split_by_the_token_budget_gives_the_same_states(tiny_st_dir):
    whole = _load(tiny_st_dir, "float32").transformer
    sliced = OpenVINOTransformer(whole.source, whole._compiled, token_budget=8)
    ids = torch.randint(5, 100, (7, 6))  # (B, T): 8 tokens a slice -> 7 slices of one row
    mask = torch.ones_like(ids)
    mask[3:, 4:] = 0
    expected = whole(ids, mask).last_hidden_state
    np.testing.assert_array_equal(sliced(ids, mask).last_hidden_state, expected)
    assert expected.shape == (7, 6, whole.config.hidden_size)


def test_training_through_openvino_is_refused(tiny_st_dir):
    encoder = _load(tiny_st_dir, "float32").train()
    features = encoder.pad([[101, 7592, 102]])
    with pytest.raises(RuntimeError, match="inference only; train with --cpu-backend torch"):
        encoder(**features)


@pytest.mark.parametrize(
    ("dtype", "features", "message"),
    [
        ("bfloat16", CpuFeatures(frozenset({"avx2"}), "AVX2"), "needs native bf16"),
        ("int8", CpuFeatures(frozenset({"avx512_bf16"}), "AVX512"), "int8 dot-product"),
        ("float16", MATRIX_CPU, "float16 needs a CUDA device"),
        ("half", MATRIX_CPU, "unknown dtype 'half'"),
    ],
)
def test_paths_this_cpu_cannot_run_are_refused(dtype, features, message):
    with pytest.raises(ValueError, match=message):
        openvino_compute_path(dtype, CPU, features)


def test_auto_takes_bfloat16_only_with_native_bf16():
    assert openvino_compute_path("auto", CPU, MATRIX_CPU).name == "bfloat16"
    assert openvino_compute_path("auto", CPU, CpuFeatures(frozenset(), "AVX2")).name == "float32"


def test_off_cpu_unknown_backend_and_missing_openvino_are_refused(monkeypatch):
    with pytest.raises(ValueError, match="runs on CPU only"):
        resolve_compute_path("float32", torch.device("cuda"), "openvino")
    with pytest.raises(ValueError, match="unknown --cpu-backend 'onnx'; valid: torch, openvino"):
        resolve_compute_path("float32", CPU, "onnx")
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino raises ImportError
    with pytest.raises(ValueError, match=r"pip install 'sbert-pipeline\[openvino\]'"):
        resolve_compute_path("float32", CPU, "openvino")


def test_a_path_resolved_for_another_device_is_refused():
    path = resolve_compute_path("float32", CPU)
    assert resolve_compute_path(path, CPU) is path
    with pytest.raises(ValueError, match="resolved for cpu, not cuda"):
        resolve_compute_path(path, torch.device("cuda"))


def test_the_option_reaches_the_settings_and_the_loaded_encoder(tiny_st_dir, sample_texts):
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    args = parser.parse_args(
        ["--model", str(tiny_st_dir), "--device", "cpu", "--cpu-backend", "openvino"]
    )
    settings = settings_from_flags(args)
    assert settings.backend == "openvino"
    settings.validate()
    assert settings.describe(settings.inspect())["compute"]["backend"] == "openvino"
    encoder = settings.load()
    assert isinstance(encoder.transformer, OpenVINOTransformer)
    assert encoder.encode(sample_texts, **settings.encode_kwargs()).shape[0] == len(sample_texts)


def test_settings_refuse_a_path_before_any_work(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(ValueError, match="needs the openvino package"):
        EncoderSettings("all-MiniLM-L6-v2", device="cpu", backend="openvino").validate()
