"""Module chains, prompts and Matryoshka truncation against sentence-transformers, and what is
refused, on the tiny BERT (right padding) and the tiny Qwen3 (left padding)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from tiny_models import HIDDEN, TEXTS, build_bert, build_qwen3, st_folder

from sbert_core import ModelLoadError, SentenceEncoder, inspect_model
from sbert_core.model.pooling import POOLING_MODES

TOLERANCE = 1e-5
PROMPTS = {"query": "query: ", "passage": "passage: ", "classify": "Classify the topic: "}


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return build_bert(tmp_path_factory.mktemp("bert") / "hf")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    return build_qwen3(tmp_path_factory.mktemp("qwen3") / "hf")


def _pair(st_dir, **load):
    oracle = SentenceTransformer(str(st_dir), device="cpu", **load)
    return oracle, SentenceEncoder.load(st_dir, device="cpu", **load)


def _diff(a, b) -> float:
    assert a.shape == b.shape
    return float(np.abs(a - b).max())


def test_dense_layer_norm_normalize_chain(bert_dir, tmp_path):
    # LaBSE-like: CLS + Dense(tanh) + Normalize; then two Dense with a bias-free identity and a
    # LayerNorm, which sentence-t5-style and distilled models use.
    dense = [(HIDDEN, 40, "Tanh", True), (40, 24, "Identity", False)]
    st_dir = st_folder(bert_dir, tmp_path / "m", pooling="cls", dense=dense, layer_norm=True)
    oracle, ours = _pair(st_dir)
    assert ours.dim == 24 and ours.normalize
    assert [type(m).__name__ for m in ours.heads] == ["Dense", "Dense", "LayerNorm", "Normalize"]
    assert _diff(ours.encode(TEXTS), oracle.encode(TEXTS)) <= TOLERANCE
    # Without Normalize: what the chain gives before it (the triplet objective's vectors).
    raw = ours.encode(TEXTS, normalize=False)
    assert np.abs(np.linalg.norm(raw, axis=1) - 1).max() > 1e-2
    saved = ours.save(tmp_path / "saved")
    assert json.loads((saved / "2_Dense" / "config.json").read_text())["activation_function"] == (
        "torch.nn.modules.activation.Tanh"
    )
    theirs = SentenceTransformer(str(saved), device="cpu")
    assert _diff(theirs.encode(TEXTS), ours.encode(TEXTS)) <= TOLERANCE
    manifest = json.loads((saved / "sbert_manifest.json").read_text())
    assert manifest["weights_sha256"] == SentenceEncoder.load(saved).weights_sha256
    assert manifest["dim"] == 24
    assert manifest["modules"][2:] == ["Dense", "Dense", "LayerNorm", "Normalize"]


def test_identity_covers_the_dense_weights(bert_dir, tmp_path):
    dense = [(HIDDEN, 16, "Tanh", True)]
    one = inspect_model(st_folder(bert_dir, tmp_path / "one", dense=dense, seed=1))
    other = inspect_model(st_folder(bert_dir, tmp_path / "other", dense=dense, seed=2))
    plain = inspect_model(st_folder(bert_dir, tmp_path / "plain"))
    assert len({one.weights_sha256, other.weights_sha256, plain.weights_sha256}) == 3


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_include_prompt_false_drops_prompt_tokens_like_sentence_transformers(
    bert_dir, qwen_dir, tmp_path, mode
):
    for name, hf_dir in (("bert", bert_dir), ("qwen3", qwen_dir)):
        st_dir = st_folder(hf_dir, tmp_path / name, pooling=mode, include_prompt=False)
        oracle, ours = _pair(st_dir)
        prompt = "Represent the question for retrieval: "
        expected = oracle.encode(TEXTS, prompt=prompt)
        assert _diff(ours.encode(TEXTS, prompt=prompt), expected) <= TOLERANCE, name
        assert ours.prompt_length(prompt) == oracle[0]._get_prompt_length(prompt)
        if mode not in ("lasttoken", "max"):
            # The prompt's tokens really are left out: including them changes the vectors.
            included = SentenceEncoder.load(
                st_folder(hf_dir, tmp_path / f"{name}_in", pooling=mode), device="cpu"
            ).encode(TEXTS, prompt=prompt)
            assert np.abs(included - expected).max() > 1e-4, name


def test_prompt_names_default_and_tasks_match_sentence_transformers(qwen_dir, tmp_path):
    st_dir = st_folder(
        qwen_dir,
        tmp_path / "m",
        pooling="lasttoken",
        prompts=PROMPTS,
        default_prompt_name="classify",
    )
    oracle, ours = _pair(st_dir)
    assert ours.prompts.prompts == oracle.prompts
    assert ours.prompts.default_prompt_name == "classify"
    cases = [
        (ours.encode(TEXTS), oracle.encode(TEXTS)),  # the default prompt
        (ours.encode(TEXTS, prompt_name="passage"), oracle.encode(TEXTS, prompt_name="passage")),
        (ours.encode(TEXTS, prompt=""), oracle.encode(TEXTS, prompt="")),
        (ours.encode(TEXTS, task="query"), oracle.encode_query(TEXTS)),
        (ours.encode(TEXTS, task="document"), oracle.encode_document(TEXTS)),
    ]
    for got, expected in cases:
        assert _diff(got, expected) <= TOLERANCE
    assert _diff(cases[0][0], cases[2][0]) > 1e-4  # the default prompt does change vectors
    with pytest.raises(ValueError, match="unknown prompt name 'nope'"):
        ours.encode(TEXTS, prompt_name="nope")


def test_prompts_are_part_of_the_description(qwen_dir, tmp_path):
    st_dir = st_folder(qwen_dir, tmp_path / "m", pooling="lasttoken", prompts=PROMPTS)
    ours = SentenceEncoder.load(st_dir, device="cpu")
    query = ours.describe(task="query")
    document = ours.describe(task="document")
    assert (query["prompt"], query["prompt_name"]) == ("query: ", "query")
    assert (document["prompt"], document["prompt_name"]) == ("", None)
    assert ours.describe(prompt="Find: ")["prompt"] == "Find: "
    info = inspect_model(st_dir)
    assert info.describe(prompt_name="passage") == {
        key: value
        for key, value in ours.describe(prompt_name="passage").items()
        if key not in ("dtype", "compute")  # how the loaded encoder runs (issue 18)
    }
    # The saved model keeps its prompts, and sentence-transformers reads them.
    saved = ours.save(tmp_path / "saved")
    assert SentenceTransformer(str(saved), device="cpu").prompts == ours.prompts.prompts
    assert SentenceEncoder.load(saved, device="cpu").prompts == ours.prompts


def test_truncate_dim_at_load_and_per_call(bert_dir, tmp_path):
    st_dir = st_folder(bert_dir, tmp_path / "m")
    oracle, ours = _pair(st_dir, truncate_dim=16)
    assert ours.dim == 16 and ours.full_dim == HIDDEN
    expected = oracle.encode(TEXTS)
    got = ours.encode(TEXTS)
    assert _diff(got, expected) <= TOLERANCE
    # Normalize ran before truncation, so the cut vectors are not unit length (as there) ...
    assert np.abs(np.linalg.norm(got, axis=1) - 1).max() > 1e-3
    assert ours.describe()["normalized"] is False and ours.describe()["dim"] == 16
    # ... unless normalisation is asked for after it.
    renormalized = ours.encode(TEXTS, normalize=True)
    assert _diff(renormalized, oracle.encode(TEXTS, normalize_embeddings=True)) <= TOLERANCE
    assert ours.describe(normalize=True)["normalized"] is True
    assert ours.encode(TEXTS, truncate_dim=8).shape == (len(TEXTS), 8)
    assert ours.encode(TEXTS, truncate_dim=HIDDEN).shape == (len(TEXTS), HIDDEN)
    for bad in (0, HIDDEN + 1):
        with pytest.raises(ValueError, match="truncate_dim must be an integer"):
            ours.encode(TEXTS, truncate_dim=bad)
    with pytest.raises(ValueError, match="truncate_dim must be an integer"):
        SentenceEncoder.load(st_dir, device="cpu", truncate_dim=HIDDEN + 1)


def _edit_json(path, change):
    value = json.loads(path.read_text())
    path.write_text(json.dumps(change(value)))


@pytest.fixture
def bert_st_copy(bert_dir, tmp_path):
    return st_folder(bert_dir, tmp_path / "m")


def test_router_is_refused_by_name(bert_st_copy):
    def add_router(modules):
        modules[0]["type"] = "sentence_transformers.base.modules.router.Router"
        return modules

    _edit_json(bert_st_copy / "modules.json", add_router)
    with pytest.raises(ModelLoadError, match=r"Router'.*separate modules"):
        SentenceEncoder.load(bert_st_copy)


@pytest.mark.parametrize(
    "module_type",
    [
        "sentence_transformers.models.WeightedLayerPooling",
        "sentence_transformers.models.CNN",
        "my_package.Pooling",
    ],
)
def test_other_modules_are_refused_by_type(bert_st_copy, module_type):
    def replace(modules):
        modules[1]["type"] = module_type
        return modules

    _edit_json(bert_st_copy / "modules.json", replace)
    with pytest.raises(ModelLoadError, match=f"module type '{module_type}' is not supported"):
        SentenceEncoder.load(bert_st_copy)


def test_a_chain_without_pooling_is_refused(bert_st_copy):
    _edit_json(bert_st_copy / "modules.json", lambda modules: [modules[0], modules[2]])
    with pytest.raises(ModelLoadError, match="Transformer -> Normalize; supported chains"):
        SentenceEncoder.load(bert_st_copy)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("transformer_task", "fill-mask"),
        (
            "modality_config",
            {"message": {"method": "forward", "method_output_name": "last_hidden_state"}},
        ),
        ("processing_kwargs", {"text": {"max_length": 8}}),
        ("model_args", {"revision": "other"}),
        ("query_expansion", {"strategy": "fixed", "length": 32}),
    ],
)
def test_transformer_settings_that_change_the_vectors_are_refused(bert_st_copy, key, value):
    _edit_json(bert_st_copy / "sentence_bert_config.json", lambda config: {**config, key: value})
    with pytest.raises(ModelLoadError, match=f"sentence_bert_config.json: {key}"):
        SentenceEncoder.load(bert_st_copy)


def test_a_padding_side_override_is_applied(bert_st_copy):
    _edit_json(
        bert_st_copy / "sentence_bert_config.json",
        lambda config: {**config, "tokenizer_args": {"padding_side": "left"}},
    )
    oracle, ours = _pair(bert_st_copy)
    assert ours.tokenizer.padding_side == oracle.tokenizer.padding_side == "left"
    assert _diff(ours.encode(TEXTS), oracle.encode(TEXTS)) <= TOLERANCE


def test_plain_folder_with_a_chat_template_is_refused(qwen_dir, tmp_path):
    folder = tmp_path / "chat"
    shutil.copytree(qwen_dir, folder)
    _edit_json(
        folder / "tokenizer_config.json",
        lambda config: {**config, "chat_template": "{{ messages[0]['content'] }}"},
    )
    with pytest.raises(ModelLoadError, match="chat template"):
        SentenceEncoder.load(folder)


def test_other_encoder_decoder_architectures_are_refused():
    from transformers import BartConfig, T5Config, T5EncoderModel

    from sbert_core.model.architectures import transformer_class

    assert transformer_class(T5Config()) is T5EncoderModel
    with pytest.raises(ModelLoadError, match="encoder-decoder architecture 'bart'"):
        transformer_class(BartConfig())


def test_a_bfloat16_checkpoint_in_bfloat16_is_what_sentence_transformers_gives(qwen_dir, tmp_path):
    # sentence-transformers computes a checkpoint saved in bfloat16 in bfloat16; with the same
    # batches and dtype our vectors are its vectors, rotary frequencies kept in float32 as there.
    import torch
    from transformers import AutoModel

    st_dir = st_folder(qwen_dir, tmp_path / "m", pooling="lasttoken")
    AutoModel.from_pretrained(st_dir).to(torch.bfloat16).save_pretrained(st_dir)
    oracle = SentenceTransformer(str(st_dir), device="cpu")
    assert next(oracle[0].model.parameters()).dtype == torch.bfloat16
    ours = SentenceEncoder.load(st_dir, device="cpu", dtype="bfloat16")
    expected = oracle.encode(TEXTS, batch_size=len(TEXTS))
    assert _diff(ours.encode(TEXTS, batch_size=len(TEXTS)), expected) <= 1e-6
    buffers = {name: b.dtype for name, b in ours.transformer.named_buffers()}
    assert buffers["rotary_emb.inv_freq"] == torch.float32
    ours.save(tmp_path / "saved")
    assert ours.transformer.get_buffer("rotary_emb.inv_freq").dtype == torch.float32
    assert ours.dtype == torch.bfloat16
