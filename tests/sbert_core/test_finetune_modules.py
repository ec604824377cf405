"""Fine-tuning keeps what a model is made of: Dense modules, prompts, include_prompt pooling.

A model fine-tuned and saved must load here and in sentence-transformers to the same vectors,
and a model trained with a prompt records it as its default prompt.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from tiny_models import HIDDEN, TEXTS, build_bert, st_folder
from training_examples import scored_pairs

from sbert_core import SentenceEncoder
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import ExampleSet
from sbert_core.training.loop import train
from sbert_core.training.losses import CosineSimilarityLoss

PROMPTS = {"query": "query: ", "document": "passage: "}


# Training sets torch's thread count for the process (tests/conftest.py gives it back).
pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture(scope="module")
def dense_prompt_model(tmp_path_factory):
    """BERT + mean pooling without prompt tokens + Dense(tanh) + Normalize, with prompts."""
    hf_dir = build_bert(tmp_path_factory.mktemp("bert") / "hf")
    return st_folder(
        hf_dir,
        tmp_path_factory.mktemp("st") / "model",
        include_prompt=False,
        dense=[(HIDDEN, 16, "Tanh", True)],
        prompts=PROMPTS,
    )


def _examples() -> ExampleSet:
    first, second, scores = zip(*scored_pairs(32, seed=3), strict=True)
    return ExampleSet("scored_pairs", (first, second), np.asarray(scores, np.float32) / 5)


def _fine_tune(model_dir, **config) -> SentenceEncoder:
    encoder = SentenceEncoder.load(model_dir, device="cpu")
    settings = TrainingConfig(
        batch_size=8, max_steps=4, learning_rate=1e-3, device="cpu", pooling=None, **config
    )
    train(CosineSimilarityLoss(encoder), _examples(), settings)
    return encoder


def test_fine_tuned_dense_and_prompts_load_the_same_in_sentence_transformers(
    dense_prompt_model, tmp_path
):
    before = SentenceEncoder.load(dense_prompt_model, device="cpu")
    tuned = _fine_tune(dense_prompt_model)
    # Training moved the Dense weights too, not only the transformer's.
    assert not torch.equal(before.heads[0].linear.weight, tuned.heads[0].linear.weight)
    saved = tuned.save(tmp_path / "tuned")
    modules = json.loads((saved / "modules.json").read_text())
    assert [m["path"] for m in modules] == ["", "1_Pooling", "2_Dense", "3_Normalize"]
    assert json.loads((saved / "1_Pooling" / "config.json").read_text())["include_prompt"] is False

    oracle = SentenceTransformer(str(saved), device="cpu")
    again = SentenceEncoder.load(saved, device="cpu")
    for kwargs, theirs in (
        ({}, oracle.encode(TEXTS)),
        ({"task": "query"}, oracle.encode_query(TEXTS)),
        ({"task": "document"}, oracle.encode_document(TEXTS)),
    ):
        ours = tuned.encode(TEXTS, **kwargs)
        assert np.abs(ours - theirs).max() <= 1e-5
        assert np.abs(again.encode(TEXTS, **kwargs) - ours).max() <= 1e-5
    assert again.prompts == before.prompts


def test_a_model_trained_with_a_prompt_records_it(dense_prompt_model, tmp_path):
    tuned = _fine_tune(dense_prompt_model, prompt="Represent the topic: ")
    assert tuned.prompts.default_prompt_name == "training"
    assert tuned.prompts.resolve() == "Represent the topic: "
    saved = tuned.save(tmp_path / "tuned")
    oracle = SentenceTransformer(str(saved), device="cpu")
    assert oracle.default_prompt_name == "training"
    assert np.abs(oracle.encode(TEXTS) - tuned.encode(TEXTS)).max() <= 1e-5
    # By name: the model's own query prompt becomes the default.
    by_name = _fine_tune(dense_prompt_model, prompt_name="query")
    assert by_name.prompts.default_prompt_name == "query"
    assert by_name.describe()["prompt"] == "query: "


def test_training_applies_the_prompt_it_records(dense_prompt_model):
    from sbert_core.training.batches import BatchFeatures

    encoder = SentenceEncoder.load(dense_prompt_model, device="cpu")
    examples = _examples()
    plain = BatchFeatures(encoder, examples, True, torch.device("cpu"))
    prompted = BatchFeatures(encoder, examples, True, torch.device("cpu"), prompt="query: ")
    assert "prompt_length" not in plain.features(np.arange(4))[0]
    batch = prompted.features(np.arange(4))[0]
    assert batch["prompt_length"] == encoder.prompt_length("query: ") > 1
    first = examples.texts[0][0]
    assert prompted.token_ids[0] == encoder.tokenize([first], prompt="query: ").input_ids[0]


def test_prompt_name_and_prompt_together_are_refused():
    with pytest.raises(ValueError, match="not both"):
        TrainingConfig(prompt_name="query", prompt="x").validate()
