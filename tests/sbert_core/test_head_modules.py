import json

import pytest
import torch
from safetensors.torch import save_file
from sentence_transformers import models

from sbert_core import ModelLoadError
from sbert_core.model.head_modules import (
    Dense,
    LayerNorm,
    activation_class,
    check_truncate_dim,
    load_head_module,
    save_head_module,
    truncate,
)


def _st_dense(tmp_path, **kwargs):
    torch.manual_seed(0)
    module = models.Dense(**kwargs)
    tmp_path.mkdir()
    module.save(str(tmp_path))
    return module


@pytest.mark.parametrize(
    "kwargs",
    [
        {"in_features": 8, "out_features": 4},  # Tanh, the default
        {"in_features": 8, "out_features": 4, "activation_function": torch.nn.Identity()},
        {
            "in_features": 8,
            "out_features": 8,
            "bias": False,
            "activation_function": torch.nn.GELU(),
        },
        {"in_features": 8, "out_features": 6, "use_residual": True},
        {"in_features": 8, "out_features": 8, "use_residual": True},
    ],
)
def test_dense_matches_sentence_transformers_both_ways(tmp_path, kwargs):
    theirs = _st_dense(tmp_path / "theirs", **kwargs)
    ours = load_head_module("dense", tmp_path / "theirs", width=8)
    x = torch.randn(5, 8)
    expected = theirs({"sentence_embedding": x})["sentence_embedding"]
    assert (ours(x) - expected).abs().max() <= 1e-6

    save_head_module(ours, tmp_path / "ours")
    again = models.Dense.load(str(tmp_path / "ours"))
    assert (again({"sentence_embedding": x})["sentence_embedding"] - expected).abs().max() <= 1e-6


def test_layer_norm_matches_sentence_transformers_both_ways(tmp_path):
    theirs = models.LayerNorm(8)
    with torch.no_grad():
        theirs.norm.weight.uniform_(0.5, 1.5)
        theirs.norm.bias.uniform_(-1, 1)
    (tmp_path / "theirs").mkdir()
    theirs.save(str(tmp_path / "theirs"))
    ours = load_head_module("layer_norm", tmp_path / "theirs", width=8)
    x = torch.randn(5, 8)
    expected = theirs({"sentence_embedding": x})["sentence_embedding"]
    assert (ours(x) - expected).abs().max() <= 1e-6
    save_head_module(ours, tmp_path / "ours")
    again = models.LayerNorm.load(str(tmp_path / "ours"))
    assert (again({"sentence_embedding": x})["sentence_embedding"] - expected).abs().max() <= 1e-6


def test_normalize_needs_no_folder(tmp_path):
    module = load_head_module("normalize", tmp_path / "absent")
    assert torch.allclose(module(torch.tensor([[3.0, 4.0]])), torch.tensor([[0.6, 0.8]]))


@pytest.mark.parametrize(
    "name",
    ["torch.nn.modules.activation.Tanh", "torch.nn.Tanh", "torch.nn.modules.linear.Identity"],
)
def test_activation_names_as_saved(name):
    assert activation_class(name)()(torch.tensor([0.0])).item() == 0.0


@pytest.mark.parametrize(
    "name",
    [
        "os.system",
        "my_package.layers.Swish",
        "torch.nn.modules.linear.Linear",  # not an activation (and needs arguments)
        "torch.nn.modules.activation.Nope",
        "evil.torch.nn.modules.activation.Tanh",
    ],
)
def test_foreign_activations_are_refused(name):
    with pytest.raises(ModelLoadError, match="activation"):
        activation_class(name)


def _dense_folder(tmp_path, config=None, weights=None):
    folder = tmp_path / "2_Dense"
    folder.mkdir(parents=True)
    config = config or {"in_features": 4, "out_features": 2, "bias": True}
    (folder / "config.json").write_text(json.dumps(config))
    if weights is not None:
        save_file(weights, str(folder / "model.safetensors"))
    return folder


def test_dense_weights_are_checked(tmp_path):
    good = {"linear.weight": torch.zeros(2, 4), "linear.bias": torch.zeros(2)}
    folder = _dense_folder(tmp_path / "missing", weights={"linear.weight": torch.zeros(2, 4)})
    with pytest.raises(ModelLoadError, match=r"'linear\.bias' is missing"):
        load_head_module("dense", folder)
    folder = _dense_folder(tmp_path / "shape", weights={**good, "linear.weight": torch.zeros(4, 2)})
    with pytest.raises(ModelLoadError, match=r"shape \[4, 2\].*needs \[2, 4\]"):
        load_head_module("dense", folder)
    nan = {**good, "linear.bias": torch.tensor([0.0, float("nan")])}
    folder = _dense_folder(tmp_path / "nan", weights=nan)
    with pytest.raises(ModelLoadError, match="NaN"):
        load_head_module("dense", folder)
    folder = _dense_folder(tmp_path / "foreign", weights={**good, "other.weight": torch.zeros(1)})
    with pytest.raises(ModelLoadError, match=r"'other\.weight' is not a parameter"):
        load_head_module("dense", folder)
    folder = _dense_folder(tmp_path / "none")
    with pytest.raises(ModelLoadError, match=r"no model\.safetensors"):
        load_head_module("dense", folder)
    folder = _dense_folder(tmp_path / "ok", weights=good)
    with pytest.raises(ModelLoadError, match="give 8-d"):
        load_head_module("dense", folder, width=8)
    assert isinstance(load_head_module("dense", folder, width=4), Dense)


def test_pickle_dense_weights_need_allow_pickle(tmp_path):
    folder = _dense_folder(tmp_path)
    torch.save(
        {"linear.weight": torch.ones(2, 4), "linear.bias": torch.ones(2)},
        folder / "pytorch_model.bin",
    )
    with pytest.raises(ModelLoadError, match="pickle"):
        load_head_module("dense", folder)
    module = load_head_module("dense", folder, allow_pickle=True)
    assert torch.equal(module.linear.weight, torch.ones(2, 4))


def test_token_level_modules_are_refused(tmp_path):
    folder = _dense_folder(
        tmp_path,
        config={"in_features": 4, "out_features": 2, "module_input_name": "token_embeddings"},
    )
    with pytest.raises(ModelLoadError, match="module_input_name 'token_embeddings'"):
        load_head_module("dense", folder)


def test_layer_norm_config_is_checked(tmp_path):
    folder = tmp_path / "3_LayerNorm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"dimension": "8"}))
    with pytest.raises(ModelLoadError, match="dimension must be a positive integer"):
        load_head_module("layer_norm", folder)
    module = LayerNorm(8)
    save_head_module(module, tmp_path / "ok")
    assert load_head_module("layer_norm", tmp_path / "ok").dimension == 8


def test_truncate_keeps_leading_components():
    x = torch.arange(12.0).view(2, 6)
    assert torch.equal(truncate(x, 2), torch.tensor([[0.0, 1.0], [6.0, 7.0]]))
    assert truncate(x, None) is x
    assert check_truncate_dim(6, 6) == 6
    for bad in (0, 7, 2.5, True):
        with pytest.raises(ValueError, match=r"truncate_dim must be an integer in \[1, 6\]"):
            check_truncate_dim(bad, 6)
