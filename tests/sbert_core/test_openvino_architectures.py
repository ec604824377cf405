"""The OpenVINO backend on every supported architecture, on padded batches.

Traced with SDPA, decoders (Qwen2, Qwen3: left padding, causal masks) and ModernBERT gave NaN
vectors for any batch with a padded row: the pad positions' fully masked attention rows
became NaN and reached every position. The conversion now traces eager attention and checks
itself against torch on a padded probe batch, refusing a model it gets wrong.
"""

import contextlib

import numpy as np
import pytest
import torch
from tiny_models import BUILDERS, TEXTS, TYPICAL_HEADS, st_folder

from sbert_core import SentenceEncoder
from sbert_core.inference.compute_paths import resolve_compute_path
from sbert_core.inference.openvino_path import (
    check_conversion,
    eager_attention,
    openvino_model,
    probe_batch,
)

CPU = torch.device("cpu")
# Texts of many lengths, so that batches of three hold padded rows.
PADDED = [*TEXTS, "a", "the dog runs on the road in the rain with the man and the woman"]


@pytest.fixture(scope="module")
def st_dirs(tmp_path_factory) -> dict:
    """A sentence-transformers folder per architecture (built on first use)."""
    built: dict = {}

    def folder(name: str):
        if name not in built:
            root = tmp_path_factory.mktemp(name)
            hf_dir = BUILDERS[name](root / "hf")
            head = TYPICAL_HEADS.get(name, {"pooling": "mean"})
            built[name] = st_folder(hf_dir, root / "st", **head)
        return built[name]

    return folder


def _openvino(st_dir, dtype: str = "float32") -> SentenceEncoder:
    path = resolve_compute_path(dtype, CPU, "openvino")
    return SentenceEncoder.load(st_dir, device="cpu", dtype=path)


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_float32_gives_torchs_vectors_on_padded_batches(st_dirs, name):
    expected = SentenceEncoder.load(st_dirs(name), device="cpu").encode(PADDED, batch_size=3)
    got = _openvino(st_dirs(name)).encode(PADDED, batch_size=3)
    assert np.isfinite(got).all()
    assert np.abs(got - expected).max() <= 1e-5
    assert np.abs(expected[0] - expected[1]).max() > 1e-3  # not a constant output agreeing


def test_the_models_own_attention_comes_back_after_the_trace(st_dirs):
    encoder = _openvino(st_dirs("qwen3"))
    assert encoder.transformer.source.config._attn_implementation == "sdpa"


def test_a_conversion_that_differs_from_torch_is_refused(st_dirs, monkeypatch):
    # Traced with SDPA, as before the fix, the decoder's conversion gives NaN on padded rows.
    monkeypatch.setattr(
        "sbert_core.inference.openvino_path.eager_attention",
        lambda model: contextlib.nullcontext(model),
    )
    with pytest.raises(ValueError, match=r"gives other hidden states than torch.*--cpu-backend"):
        _openvino(st_dirs("qwen3"))


def test_the_probe_pads_as_the_tokenizer_pads(st_dirs):
    encoder = SentenceEncoder.load(st_dirs("qwen3"), device="cpu")
    probe = probe_batch(encoder.transformer, encoder.tokenizer)
    assert encoder.tokenizer.padding_side == "left"
    assert probe["attention_mask"][1].tolist() == [0] * 6 + [1] * 5
    assert (probe["input_ids"][1, :6] == encoder.tokenizer.pad_token_id).all()
    right = probe_batch(encoder.transformer)
    assert right["attention_mask"][1].tolist() == [1] * 5 + [0] * 6


def test_the_check_passes_a_good_conversion_and_refuses_one_off_by_one(st_dirs):
    import openvino as ov

    transformer = SentenceEncoder.load(st_dirs("bert"), device="cpu").transformer
    probe = probe_batch(transformer)
    model = openvino_model(transformer, "float32", probe=probe)
    check_conversion(model, transformer, probe)  # the good conversion passes
    # A model whose output is off by 1 at every position is refused.
    copy = model.clone()
    states = copy.get_results()[0].input_value(0)
    one = ov.opset13.constant(np.float32(1.0))
    shifted = ov.Model([ov.opset13.add(states, one)], copy.get_parameters())
    with pytest.raises(ValueError, match="largest difference 1"):
        check_conversion(shifted, transformer, probe)


def test_eager_attention_leaves_a_model_without_the_switch_as_it_is():
    module = torch.nn.Linear(2, 2)
    with eager_attention(module) as inside:
        assert inside is module


def test_eager_attention_keeps_the_models_own_where_eager_is_refused(st_dirs):
    transformer = SentenceEncoder.load(st_dirs("bert"), device="cpu").transformer

    def refuse(implementation):
        raise ValueError(f"{implementation} is not supported")

    transformer.set_attn_implementation = refuse
    with eager_attention(transformer):
        assert transformer.config._attn_implementation == "sdpa"
