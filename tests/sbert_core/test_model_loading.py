import json
import shutil

import numpy as np
import pytest

from sbert_core import ModelLoadError, SentenceEncoder
from sbert_core.model.source import packaged_default_model_dir, resolve_model_dir


def test_plain_huggingface_folder_gets_mean_pooling(tiny_bert_dir):
    encoder = SentenceEncoder.load(tiny_bert_dir, device="cpu")
    assert encoder.pooling.mode == "mean"
    assert encoder.normalize is False
    assert encoder.max_seq_length == 64  # the tokenizer's / position limit
    assert encoder.encode(["a man plays"]).shape == (1, 32)


@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"])
def test_default_model_names_resolve_to_the_package(name):
    directory, model_id = resolve_model_dir(name)
    assert directory == packaged_default_model_dir()
    assert model_id == "sentence-transformers/all-MiniLM-L6-v2"


def test_unknown_hub_id_fails_offline_with_advice(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match=r"not a local folder.*pass a model.s folder") as info:
        SentenceEncoder.load("some-org/some-model-that-is-not-here")
    assert "some-org/some-model-that-is-not-here" in str(info.value)


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        SentenceEncoder.load(str(tmp_path / "nope"))


def test_folder_without_model_files(tmp_path):
    with pytest.raises(ModelLoadError, match="not a model directory"):
        SentenceEncoder.load(tmp_path)


def test_truncated_safetensors_is_named_before_loading(tiny_st_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_st_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    with pytest.raises(ModelLoadError, match=r"model\.safetensors.*truncated"):
        SentenceEncoder.load(broken)


def test_garbage_safetensors_is_named(tiny_st_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_st_dir, broken)
    (broken / "model.safetensors").write_bytes(b"\xff" * 100)
    with pytest.raises(ModelLoadError, match=r"model\.safetensors: corrupt"):
        SentenceEncoder.load(broken)


def test_pickle_weights_are_refused_unless_allowed(tiny_bert_dir, tmp_path):
    import torch
    from safetensors.torch import load_file

    model = tmp_path / "pickled"
    shutil.copytree(tiny_bert_dir, model)
    state = load_file(model / "model.safetensors")
    (model / "model.safetensors").unlink()
    torch.save(state, model / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="pickle"):
        SentenceEncoder.load(model)
    reference = SentenceEncoder.load(tiny_bert_dir, device="cpu").encode(["a dog runs"])
    allowed = SentenceEncoder.load(model, device="cpu", allow_pickle=True).encode(["a dog runs"])
    assert np.abs(allowed - reference).max() <= 1e-6


def test_unknown_module_type_is_refused_without_importing(tiny_st_dir, tmp_path):
    model = tmp_path / "custom"
    shutil.copytree(tiny_st_dir, model)
    modules = json.loads((model / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3", "type": "evil_package.Backdoor"})
    (model / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelLoadError, match=r"evil_package\.Backdoor"):
        SentenceEncoder.load(model)


def test_unknown_pooling_mode_lists_valid_ones(tiny_st_dir):
    with pytest.raises(ValueError, match="cls, max, mean, mean_sqrt_len_tokens, weightedmean"):
        SentenceEncoder.load(tiny_st_dir, pooling="sum")


def test_pooling_config_in_new_spelling(tiny_st_dir, tmp_path):
    model = tmp_path / "new"
    shutil.copytree(tiny_st_dir, model)
    (model / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": 32, "pooling_mode": "cls", "include_prompt": True})
    )
    assert SentenceEncoder.load(model, device="cpu").pooling.mode == "cls"


def test_max_seq_length_over_limit_is_refused(tiny_st_dir):
    with pytest.raises(ValueError, match="max_seq_length"):
        SentenceEncoder.load(tiny_st_dir, max_seq_length=10_000)
