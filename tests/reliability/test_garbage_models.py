"""Item 5 of issue 13: garbage models are refused before any output is touched.

Weights that do not cover the architecture, have wrong shapes or hold NaN/Inf; paths in
``modules.json`` or a sharded-weight index that leave the model folder. And model identity is
the weights' sha256 plus settings: an identical copy of a model folder is the same model.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
from garbage_helpers import embed_argv, texts, write_txt
from safetensors.torch import load_file, save_file
from sbert_pipeline.io.embeddings import IncompatibleEmbeddingsError, require_compatible
from sbert_pipeline.jobs.cli import main as cli

from sbert_core import ModelLoadError, SentenceEncoder, inspect_model
from tests.stage_commands import embed, index, search


@pytest.fixture
def model_copy(tiny_st_dir, tmp_path):
    """A private copy of the tiny sentence-transformers folder, free to damage."""
    copy = tmp_path / "model"
    shutil.copytree(tiny_st_dir, copy)
    return copy


def _rewrite_weights(model, change):
    """Replace ``model.safetensors`` with ``change(state dict)``."""
    state = load_file(model / "model.safetensors")
    save_file(change(state), model / "model.safetensors")


def test_weights_holding_no_matching_tensor_are_refused_before_the_output(
    model_copy, tmp_path, capsys
):
    # The reproduction: every tensor renamed, so transformers would init them all at random.
    _rewrite_weights(model_copy, lambda state: {f"foo.{k}": v for k, v in state.items()})
    corpus = write_txt(tmp_path / "in", texts(5))
    out = tmp_path / "out"
    assert cli(["embed", *embed_argv(corpus, out, model_copy)]) == 2
    message = capsys.readouterr().err
    assert "model.safetensors: tensor 'embeddings.LayerNorm.bias' is missing" in message
    assert "Traceback" not in message
    assert not out.exists()


def test_missing_parameter_is_named(model_copy):
    name = "encoder.layer.1.output.dense.weight"
    _rewrite_weights(model_copy, lambda state: {k: v for k, v in state.items() if k != name})
    with pytest.raises(ModelLoadError, match=rf"model\.safetensors: tensor '{name}' is missing"):
        inspect_model(model_copy)


def test_foreign_tensor_in_the_base_model_is_refused(model_copy):
    # A third layer the 2-layer config does not have: weights of another model.
    extra = "encoder.layer.2.output.dense.weight"
    _rewrite_weights(model_copy, lambda state: {**state, extra: torch.zeros(32, 64)})
    with pytest.raises(ModelLoadError, match=rf"tensor '{extra}' is not a parameter"):
        inspect_model(model_copy)


def test_wrong_shape_is_named(model_copy):
    name = "encoder.layer.0.attention.self.query.weight"
    _rewrite_weights(model_copy, lambda state: {**state, name: torch.zeros(32, 16)})
    with pytest.raises(ModelLoadError, match=rf"'{name}' has shape \[32, 16\].*needs \[32, 32\]"):
        SentenceEncoder.load(model_copy, device="cpu")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_at_inspect_time(model_copy, tmp_path, bad):
    name = "encoder.layer.1.attention.output.dense.weight"

    def poison(state):
        state[name][3, 5] = bad
        return state

    _rewrite_weights(model_copy, poison)
    with pytest.raises(ModelLoadError, match=rf"model\.safetensors: tensor '{name}' has NaN"):
        inspect_model(model_copy)
    corpus = write_txt(tmp_path / "in", texts(5))
    with pytest.raises(ModelLoadError, match="NaN or infinite"):
        embed(embed_argv(corpus, tmp_path / "out", model_copy))
    assert not (tmp_path / "out").exists()


def test_non_finite_pickle_weights_are_refused_after_loading(tiny_bert_dir, tmp_path):
    model = tmp_path / "pickled"
    shutil.copytree(tiny_bert_dir, model)
    state = load_file(model / "model.safetensors")
    state["pooler.dense.weight"][0, 0] = float("nan")
    (model / "model.safetensors").unlink()
    torch.save(state, model / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match=r"'pooler\.dense\.weight' has NaN"):
        SentenceEncoder.load(model, device="cpu", allow_pickle=True)


def test_a_task_model_checkpoint_still_loads(tiny_st_dir, model_copy, sample_texts):
    # BertForMaskedLM-style names: the base model under ``bert.``, a head beside it. The head
    # is not part of the encoder; transformers drops it and so do the checks.
    def as_task_model(state):
        renamed = {f"bert.{k}": v for k, v in state.items()}
        return {**renamed, "cls.predictions.bias": torch.zeros(8)}

    _rewrite_weights(model_copy, as_task_model)
    reference = SentenceEncoder.load(tiny_st_dir, device="cpu").encode(sample_texts[:4])
    loaded = SentenceEncoder.load(model_copy, device="cpu").encode(sample_texts[:4])
    assert np.abs(loaded - reference).max() <= 1e-6


def test_a_checkpoint_without_the_unused_pooler_still_loads(tiny_st_dir, model_copy, sample_texts):
    # Many sentence-transformers checkpoints drop the pooler: the encoder pools the hidden
    # states and never runs it, so its absence changes no vector.
    _rewrite_weights(
        model_copy, lambda state: {k: v for k, v in state.items() if not k.startswith("pooler.")}
    )
    reference = SentenceEncoder.load(tiny_st_dir, device="cpu").encode(sample_texts[:4])
    loaded = SentenceEncoder.load(model_copy, device="cpu").encode(sample_texts[:4])
    assert np.abs(loaded - reference).max() <= 1e-6


def _shard(model, names_for_shard: dict[str, str]) -> None:
    """Split ``model.safetensors`` into the shard files named by ``names_for_shard``."""
    state = load_file(model / "model.safetensors")
    (model / "model.safetensors").unlink()
    files = sorted(set(names_for_shard.values()))
    weight_map = {}
    for position, name in enumerate(sorted(state)):
        weight_map[name] = files[position % len(files)]
    for file in files:
        target = model / file
        target.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v for k, v in state.items() if weight_map[k] == file}, target)
    index_file = model / "model.safetensors.index.json"
    index_file.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_sharded_weights_inside_the_folder_load(tiny_st_dir, model_copy, sample_texts):
    _shard(model_copy, {"a": "model-1.safetensors", "b": "model-2.safetensors"})
    reference = SentenceEncoder.load(tiny_st_dir, device="cpu").encode(sample_texts[:3])
    loaded = SentenceEncoder.load(model_copy, device="cpu").encode(sample_texts[:3])
    assert np.abs(loaded - reference).max() <= 1e-6


def test_shard_paths_leaving_the_folder_are_refused(model_copy, tmp_path):
    _shard(model_copy, {"a": "model-1.safetensors", "b": "model-2.safetensors"})
    index_file = model_copy / "model.safetensors.index.json"
    weight_map = json.loads(index_file.read_text())["weight_map"]
    outside = tmp_path / "outside.safetensors"
    shutil.move(model_copy / "model-2.safetensors", outside)

    def point_second_shard_at(path: str) -> None:
        moved = {k: (path if v == "model-2.safetensors" else v) for k, v in weight_map.items()}
        index_file.write_text(json.dumps({"weight_map": moved}))

    for escape in ["../outside.safetensors", str(outside)]:
        point_second_shard_at(escape)
        with pytest.raises(ModelLoadError, match=r"index\.json: path .* leaves the model folder"):
            inspect_model(model_copy)
    (model_copy / "sub").mkdir()
    os.symlink(tmp_path, model_copy / "sub" / "up")  # a folder link out of the model folder
    point_second_shard_at("sub/up/outside.safetensors")
    with pytest.raises(ModelLoadError, match=r"resolves to .* outside the model folder"):
        inspect_model(model_copy)


@pytest.mark.parametrize("escape", ["../elsewhere", "/etc", "1_Pooling/../../elsewhere"])
def test_module_paths_leaving_the_folder_are_refused(model_copy, tmp_path, escape):
    shutil.copytree(model_copy / "1_Pooling", tmp_path / "elsewhere")
    modules_file = model_copy / "modules.json"
    modules = json.loads(modules_file.read_text())
    modules[1]["path"] = escape
    modules_file.write_text(json.dumps(modules))
    with pytest.raises(ModelLoadError, match=rf"modules\.json: path '{escape}' leaves"):
        inspect_model(model_copy)


def test_module_symlink_out_of_the_folder_is_refused(model_copy, tmp_path):
    shutil.move(model_copy / "1_Pooling", tmp_path / "pooling_elsewhere")
    os.symlink(tmp_path / "pooling_elsewhere", model_copy / "1_Pooling")
    with pytest.raises(ModelLoadError, match=r"modules\.json: path '1_Pooling' resolves to"):
        inspect_model(model_copy)


def test_a_copy_of_the_model_folder_is_the_same_model(tiny_st_dir, tmp_path):
    # Embeddings made with a copy elsewhere, searched with the original (sbert search --help).
    copy = tmp_path / "elsewhere" / "model"
    shutil.copytree(tiny_st_dir, copy)
    corpus = write_txt(tmp_path / "in", texts(30))
    embed([*embed_argv(corpus, tmp_path / "emb", copy), "--keep-text"])
    index(["--embeddings", str(tmp_path / "emb"), "--output", str(tmp_path / "ix")])
    query = texts(30)[7]
    found = search(["--index", str(tmp_path / "ix"), "--model", str(tiny_st_dir), query])
    assert found.results[0].hits[0].text == query
    original, duplicate = inspect_model(tiny_st_dir), inspect_model(copy)
    assert original.model_id != duplicate.model_id
    require_compatible(original.describe(), duplicate.describe(), "copy")


def test_a_manifest_missing_model_fields_is_a_mismatch(tiny_st_dir):
    described = inspect_model(tiny_st_dir).describe()
    for field in ("weights_sha256", "dim", "pooling", "normalized", "max_seq_length"):
        partial = {k: v for k, v in described.items() if k != field}
        with pytest.raises(IncompatibleEmbeddingsError, match=rf"{field}: 'missing' vs"):
            require_compatible(partial, described, "an old manifest and the model")
        with pytest.raises(IncompatibleEmbeddingsError, match=field):
            require_compatible(described, partial, "the model and an old manifest")


def test_tied_parameters_are_covered_by_any_of_their_names(tmp_path):
    # T5 shares one embedding matrix under three names and saves it under one of them.
    from transformers import T5Config, T5Model

    from sbert_core.model.artifact import safetensors_tensors
    from sbert_core.model.weight_checks import check_weight_coverage

    config = T5Config(d_model=16, d_ff=32, d_kv=8, num_layers=1, num_heads=2, vocab_size=50)
    T5Model(config).save_pretrained(tmp_path / "t5")
    weights = tmp_path / "t5" / "model.safetensors"
    tensors = safetensors_tensors([weights])
    check_weight_coverage(tensors, config, weights)
    shared = {"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}
    without = {name: value for name, value in tensors.items() if name not in shared}
    with pytest.raises(ModelLoadError, match=r"'encoder\.embed_tokens\.weight' is missing"):
        check_weight_coverage(without, config, weights)
