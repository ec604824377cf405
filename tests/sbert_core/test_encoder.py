import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from sbert_core import SentenceEncoder


def test_matches_sentence_transformers_on_tiny_model(tiny_st_dir, tiny_encoder, sample_texts):
    oracle = SentenceTransformer(str(tiny_st_dir), device="cpu")
    expected = oracle.encode(sample_texts, batch_size=5)
    ours = tiny_encoder.encode(sample_texts)
    assert ours.dtype == np.float32
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1e-5


@pytest.mark.parametrize("pooling", ["mean", "max", "cls"])
def test_pooling_override_matches_oracle(tiny_bert_dir, tmp_path, sample_texts, pooling):
    from testdata import build_st_dir

    st_dir = build_st_dir(tiny_bert_dir, tmp_path / "m", pooling=pooling, normalize=False)
    oracle = SentenceTransformer(str(st_dir), device="cpu").encode(sample_texts)
    ours = SentenceEncoder.load(tiny_bert_dir, device="cpu", pooling=pooling, max_seq_length=48)
    assert ours.pooling.mode == pooling
    assert np.abs(ours.encode(sample_texts) - oracle).max() <= 1e-5


def test_output_is_in_input_order(tiny_encoder, sample_texts):
    together = tiny_encoder.encode(sample_texts, batch_size=4)
    reversed_ = tiny_encoder.encode(sample_texts[::-1], batch_size=4)[::-1]
    assert np.abs(together - reversed_).max() <= 1e-5
    # Different texts really give different vectors, so the comparison above means something.
    assert np.abs(together[0] - together[1]).max() > 1e-3


def test_batch_invariance(tiny_encoder, sample_texts):
    one_by_one = np.vstack([tiny_encoder.encode([text]) for text in sample_texts])
    for kwargs in ({"batch_size": 7}, {"batch_size": 128}, {"token_budget": 64}):
        assert np.abs(tiny_encoder.encode(sample_texts, **kwargs) - one_by_one).max() <= 1e-5


def test_empty_input_gives_zero_rows(tiny_encoder):
    out = tiny_encoder.encode([])
    assert out.shape == (0, tiny_encoder.dim)
    assert out.dtype == np.float32


@pytest.mark.parametrize("bad", [None, 3, b"bytes"])
def test_non_string_names_its_position(tiny_encoder, bad):
    with pytest.raises(TypeError, match=r"texts\[2\]"):
        tiny_encoder.encode(["a", "b", bad, "d"])


def test_single_string_is_refused_by_encode_detailed(tiny_encoder):
    with pytest.raises(TypeError, match="single string"):
        tiny_encoder.encode_detailed("a man plays the guitar")


def test_truncation_is_reported(tiny_encoder, sample_texts):
    result = tiny_encoder.encode_detailed(sample_texts)
    long_ones = [i for i, t in enumerate(sample_texts) if t.startswith("the cat and the dog")]
    assert long_ones
    assert sorted(np.flatnonzero(result.truncated).tolist()) == long_ones
    assert result.n_truncated == len(long_ones)
    assert result.n_tokens.max() == tiny_encoder.max_seq_length
    assert result.n_tokens.dtype == np.int32


def test_normalize_switch(tiny_encoder, sample_texts):
    raw = tiny_encoder.encode(sample_texts, normalize=False)
    unit = tiny_encoder.encode(sample_texts)
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)
    assert np.allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    assert np.abs(unit - raw / np.linalg.norm(raw, axis=1, keepdims=True)).max() <= 1e-5


def test_bfloat16_is_close_and_returns_float32(tiny_st_dir, tiny_encoder, sample_texts):
    fast = SentenceEncoder.load(tiny_st_dir, device="cpu", dtype="bfloat16")
    assert fast.dtype == torch.bfloat16
    out = fast.encode(sample_texts)
    assert out.dtype == np.float32
    cosine = (out * tiny_encoder.encode(sample_texts)).sum(axis=1)
    assert cosine.min() > 0.99


def test_float16_on_cpu_is_refused(tiny_st_dir):
    with pytest.raises(ValueError, match="CUDA"):
        SentenceEncoder.load(tiny_st_dir, device="cpu", dtype="float16")


def test_unknown_dtype_is_refused(tiny_st_dir):
    with pytest.raises(ValueError, match="float32, bfloat16, float16, auto, int8"):
        SentenceEncoder.load(tiny_st_dir, device="cpu", dtype="int4")


def test_lower_case_option_is_applied(tiny_bert_dir, tmp_path, sample_texts):
    import json
    import shutil

    model = tmp_path / "m"
    shutil.copytree(tiny_bert_dir, model)
    # A cased tokenizer plus do_lower_case in the sentence-transformers config: the config wins.
    tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())
    tokenizer_config["do_lower_case"] = False
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (model / "tokenizer.json").unlink()
    (model / "modules.json").write_text(
        json.dumps(
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": "",
                    "type": "sentence_transformers.models.Transformer",
                },
                {
                    "idx": 1,
                    "name": "1",
                    "path": "p",
                    "type": "sentence_transformers.models.Pooling",
                },
            ]
        )
    )
    (model / "p").mkdir()
    (model / "p" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True})
    )
    (model / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 40, "do_lower_case": True})
    )
    encoder = SentenceEncoder.load(model, device="cpu")
    assert encoder.do_lower_case and encoder.max_seq_length == 40
    upper = encoder.encode(["A MAN PLAYS THE GUITAR"])
    lower = encoder.encode(["a man plays the guitar"])
    assert np.abs(upper - lower).max() <= 1e-6
