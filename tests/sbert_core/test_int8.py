"""The int8 and bf16 compute paths: close to float32, recorded in descriptions, refused clearly."""

import numpy as np
import pytest
import torch
from sbert_pipeline.stage_api.model_options import COMPUTE_DTYPE_CHOICES

from sbert_core import SentenceEncoder
from sbert_core.inference.compute_paths import INT8_QUANTIZER, int8_engine, resolve_compute_path
from sbert_core.inference.cpu_features import CpuFeatures, detect_cpu_features, parse_cpu_flags
from sbert_core.inference.encoder_settings import EncoderSettings


def _load_int8(model_dir, monkeypatch) -> SentenceEncoder:
    """The int8 encoder. torch's x86/fbgemm kernels also run (slowly) without VNNI, which the
    path requires only for speed, so on such a CPU the test lets the check see VNNI: the
    numbers are tested on every machine, the refusal itself in test_int8_is_refused_without_vnni.
    """
    if not detect_cpu_features().int8_dot:
        with pytest.raises(ValueError, match="int8 dot-product instructions"):
            SentenceEncoder.load(model_dir, device="cpu", dtype="int8")
        vnni = CpuFeatures(frozenset({"avx512_vnni"}), "AVX512-VNNI (assumed by the test)")
        monkeypatch.setattr("sbert_core.inference.compute_paths.detect_cpu_features", lambda: vnni)
    return SentenceEncoder.load(model_dir, device="cpu", dtype="int8")


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_cpuinfo_flags_are_parsed():
    text = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16\n"
    features = CpuFeatures(parse_cpu_flags(text), "AVX512")
    assert features.flags == {"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}
    assert features.fast_bf16 and features.int8_dot and not features.amx
    assert features.as_dict() == {
        "flags": ["avx2", "avx512_bf16", "avx512_vnni", "avx512f"],
        "torch_capability": "AVX512",
    }


def test_int8_is_refused_without_vnni():
    no_vnni = CpuFeatures(frozenset({"avx2", "avx512f"}), "AVX512")
    with pytest.raises(ValueError, match=r"int8 dot-product instructions.*avx2, avx512f"):
        int8_engine(no_vnni, ("x86", "fbgemm"))


def test_int8_is_refused_without_quantized_engine():
    vnni = CpuFeatures(frozenset({"avx512_vnni"}), "AVX512")
    with pytest.raises(ValueError, match=r"x86 or fbgemm quantized engine.*qnnpack"):
        int8_engine(vnni, ("qnnpack",))
    assert int8_engine(vnni, ("qnnpack", "fbgemm")) == "fbgemm"


def test_int8_is_refused_off_cpu():
    with pytest.raises(ValueError, match="int8 runs on CPU only"):
        resolve_compute_path("int8", torch.device("cuda"))


def test_int8_is_a_compute_dtype_choice():
    assert "int8" in COMPUTE_DTYPE_CHOICES


def test_float32_path_is_described_with_cpu_features(tiny_st_dir):
    encoder = SentenceEncoder.load(tiny_st_dir, device="cpu")
    compute = encoder.describe()["compute"]
    assert encoder.describe()["dtype"] == "float32"
    assert compute["path"] == "float32" and "quantizer" not in compute
    assert compute["cpu_features"] == detect_cpu_features().as_dict()


def test_inspected_settings_describe_the_path_they_resolve_to(tiny_st_dir):
    settings = EncoderSettings(str(tiny_st_dir), device="cpu", dtype="bfloat16")
    assert settings.describe(settings.inspect())["compute"]["path"] == "bfloat16"


def test_bfloat16_stays_close_to_float32(tiny_st_dir, tiny_encoder, sample_texts):
    fast = SentenceEncoder.load(tiny_st_dir, device="cpu", dtype="bfloat16")
    # bf16 keeps 8 mantissa bits; on the tiny random BERT the vectors stay within 1% in angle.
    assert _cosines(fast.encode(sample_texts), tiny_encoder.encode(sample_texts)).min() > 0.99


def test_int8_stays_close_to_float32(tiny_st_dir, tiny_encoder, sample_texts, monkeypatch):
    int8 = _load_int8(tiny_st_dir, monkeypatch)
    quantized = int8.encode(sample_texts)
    exact = tiny_encoder.encode(sample_texts)
    assert _cosines(quantized, exact).min() > 0.99
    # The Linear layers really were quantized: the vectors are not the float32 ones.
    assert np.abs(quantized - exact).max() > 1e-5
    description = int8.describe()
    assert description["dtype"] == "int8"
    assert description["compute"]["quantizer"] == INT8_QUANTIZER
    assert description["compute"]["engine"] in ("x86", "fbgemm")


def test_int8_settings_validate_and_encode_through_settings(tiny_st_dir, sample_texts, monkeypatch):
    _load_int8(tiny_st_dir, monkeypatch)
    settings = EncoderSettings(str(tiny_st_dir), device="cpu", dtype="int8")
    settings.validate()
    vectors = settings.load().encode(sample_texts, **settings.encode_kwargs())
    assert vectors.shape == (len(sample_texts), settings.load().dim)
