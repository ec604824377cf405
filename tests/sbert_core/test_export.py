import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from sbert_core import SentenceEncoder
from sbert_core.model.artifact import MANIFEST_FILE, sha256_of_files


def test_saved_model_loads_in_sentence_transformers(tiny_encoder, tmp_path, sample_texts):
    out = tiny_encoder.save(tmp_path / "saved")
    oracle = SentenceTransformer(str(out), device="cpu")
    assert oracle.get_max_seq_length() == tiny_encoder.max_seq_length
    assert np.abs(oracle.encode(sample_texts) - tiny_encoder.encode(sample_texts)).max() <= 1e-6


@pytest.mark.parametrize("pooling", ["max", "cls"])
def test_pooling_and_no_normalize_survive_the_round_trip(
    tiny_bert_dir, tmp_path, sample_texts, pooling
):
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu", pooling=pooling, max_seq_length=40)
    out = encoder.save(tmp_path / "saved")
    oracle = SentenceTransformer(str(out), device="cpu")
    assert np.abs(oracle.encode(sample_texts) - encoder.encode(sample_texts)).max() <= 1e-6
    again = SentenceEncoder.load(out, device="cpu")
    assert (again.pooling, again.normalize, again.max_seq_length) == (encoder.pooling, False, 40)


def test_manifest_records_weights_and_config(tiny_encoder, tmp_path):
    out = tiny_encoder.save(tmp_path / "saved")
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["weights_sha256"] == sha256_of_files([out / "model.safetensors"])
    assert manifest["dim"] == 32 and manifest["pooling"] == "mean" and manifest["normalized"]
    assert manifest["max_seq_length"] == tiny_encoder.max_seq_length
    assert manifest["source"]["model_id"] == tiny_encoder.model_id
    assert not list(out.glob("*.bin"))


def test_refuses_non_empty_directory_without_overwrite(tiny_encoder, tmp_path):
    target = tmp_path / "taken"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        tiny_encoder.save(target)
    assert (target / "keep.txt").read_text() == "mine"
    tiny_encoder.save(target, overwrite=True)
    assert not (target / "keep.txt").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_bf16_encoder_saves_float32_weights(tiny_st_dir, tmp_path, sample_texts):
    from safetensors import safe_open

    fast = SentenceEncoder.load(tiny_st_dir, device="cpu", dtype="bfloat16")
    out = fast.save(tmp_path / "saved")
    with safe_open(out / "model.safetensors", "pt") as weights:
        dtypes = {weights.get_slice(name).get_dtype() for name in weights.keys()}  # noqa: SIM118
    assert dtypes == {"F32"}
    # The weights carry bf16 rounding, so the reloaded float32 model is close, not identical.
    reloaded = SentenceEncoder.load(out, device="cpu").encode(sample_texts)
    exact = SentenceEncoder.load(tiny_st_dir, device="cpu").encode(sample_texts)
    assert (reloaded * exact).sum(axis=1).min() > 0.999
    assert fast.dtype == torch.bfloat16


@pytest.mark.slow
def test_minilm_round_trip_both_ways(minilm, st_minilm, tmp_path, stsb_test_sentences):
    texts = stsb_test_sentences[:300]
    ours_saved = minilm.save(tmp_path / "ours")
    their_view = SentenceTransformer(str(ours_saved), device="cpu").encode(texts)
    assert np.abs(their_view - minilm.encode(texts)).max() <= 1e-6

    st_minilm.save(str(tmp_path / "theirs"))
    our_view = SentenceEncoder.load(tmp_path / "theirs", device="cpu").encode(texts)
    assert np.abs(our_view - st_minilm.encode(texts)).max() <= 1e-5
