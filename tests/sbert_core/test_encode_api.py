"""``SentenceEncoder.encode`` as sentence-transformers users call it: one string or many, and
the keywords batch_size, normalize_embeddings, convert_to_numpy, convert_to_tensor and
show_progress_bar, checked against sentence-transformers' own ``encode``."""

import logging
import math

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from sbert_core import SentenceEncoder

TEXT = "a man plays the guitar"
PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def oracle(tiny_st_dir):
    return SentenceTransformer(str(tiny_st_dir), device="cpu")


@pytest.fixture(scope="module")
def prompt_dir(tiny_st_dir, tmp_path_factory):
    """The tiny model with query and document prompts, saved by sentence-transformers."""
    folder = tmp_path_factory.mktemp("prompted") / "model"
    SentenceTransformer(str(tiny_st_dir), device="cpu", prompts=PROMPTS).save(str(folder))
    return folder


def _as_numpy(value) -> np.ndarray:
    if isinstance(value, list):
        return np.stack([row.cpu().numpy() for row in value])
    if isinstance(value, torch.Tensor):
        return value.cpu().numpy()
    return value


def test_single_string_gives_one_vector_equal_to_its_row(tiny_encoder, sample_texts):
    position = sample_texts.index(TEXT)
    one = tiny_encoder.encode(TEXT)
    assert isinstance(one, np.ndarray)
    assert one.shape == (tiny_encoder.dim,)
    assert one.dtype == np.float32
    assert np.abs(one - tiny_encoder.encode(sample_texts)[position]).max() <= 1e-5


def test_any_sequence_of_strings_is_a_batch(tiny_encoder, sample_texts):
    as_list = tiny_encoder.encode(sample_texts[:4])
    for batch in (tuple(sample_texts[:4]), np.array(sample_texts[:4]), iter(sample_texts[:4])):
        assert np.abs(tiny_encoder.encode(batch) - as_list).max() <= 1e-6


def test_convert_to_tensor_gives_a_tensor_and_wins_over_numpy(tiny_encoder, sample_texts):
    expected = tiny_encoder.encode(sample_texts)
    for kwargs in (
        {"convert_to_tensor": True},
        {"convert_to_tensor": True, "convert_to_numpy": True},
    ):
        batch = tiny_encoder.encode(sample_texts, **kwargs)
        assert isinstance(batch, torch.Tensor)
        assert batch.dtype == torch.float32
        assert batch.device == tiny_encoder.device
        assert tuple(batch.shape) == expected.shape
        assert np.abs(batch.numpy() - expected).max() <= 1e-6
    one = tiny_encoder.encode(TEXT, convert_to_tensor=True)
    assert isinstance(one, torch.Tensor)
    assert tuple(one.shape) == (tiny_encoder.dim,)


def test_convert_to_numpy_false_gives_a_list_of_row_tensors(tiny_encoder, sample_texts):
    rows = tiny_encoder.encode(sample_texts, convert_to_numpy=False)
    assert isinstance(rows, list)
    assert len(rows) == len(sample_texts)
    assert all(isinstance(row, torch.Tensor) and row.shape == (tiny_encoder.dim,) for row in rows)
    assert np.abs(_as_numpy(rows) - tiny_encoder.encode(sample_texts)).max() <= 1e-6
    one = tiny_encoder.encode(TEXT, convert_to_numpy=False)
    assert isinstance(one, torch.Tensor)
    assert tuple(one.shape) == (tiny_encoder.dim,)


def test_normalize_embeddings_gives_unit_rows_after_truncation(tiny_encoder, sample_texts):
    # The tiny model ends in Normalize, so only vectors cut after it are off unit length.
    cut = tiny_encoder.encode(sample_texts, truncate_dim=16)
    assert not np.allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-3)
    unit = tiny_encoder.encode(sample_texts, truncate_dim=16, normalize_embeddings=True)
    assert unit.shape == (len(sample_texts), 16)
    assert np.allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)
    assert np.abs(unit - cut / np.linalg.norm(cut, axis=1, keepdims=True)).max() <= 1e-5
    one = tiny_encoder.encode(TEXT, truncate_dim=16, normalize_embeddings=True)
    assert abs(float(np.linalg.norm(one)) - 1.0) <= 1e-5


def test_normalize_embeddings_and_normalize_false_is_an_error(tiny_encoder):
    with pytest.raises(ValueError, match="contradict"):
        tiny_encoder.encode(TEXT, normalize=False, normalize_embeddings=True)


@pytest.mark.parametrize("batch_size", [1, 32])
def test_batch_size_sets_the_forward_passes(tiny_encoder, sample_texts, batch_size):
    calls = []
    hook = tiny_encoder.transformer.register_forward_hook(
        lambda module, inputs, output: calls.append(module)
    )
    try:
        batched = tiny_encoder.encode(sample_texts, batch_size=batch_size)
    finally:
        hook.remove()
    assert len(calls) == math.ceil(len(sample_texts) / batch_size)
    reference = np.vstack([tiny_encoder.encode([text]) for text in sample_texts])
    assert np.abs(batched - reference).max() <= 1e-5


def test_batch_size_below_one_is_an_error_even_without_texts(tiny_encoder):
    with pytest.raises(ValueError, match="batch_size"):
        tiny_encoder.encode([], batch_size=0)


def test_show_progress_bar_writes_a_bar_without_changing_results(
    tiny_encoder, sample_texts, capsys
):
    quiet = tiny_encoder.encode(sample_texts, batch_size=8, show_progress_bar=False)
    assert capsys.readouterr().err == ""
    shown = tiny_encoder.encode(sample_texts, batch_size=8, show_progress_bar=True)
    n_batches = math.ceil(len(sample_texts) / 8)
    err = capsys.readouterr().err
    assert "Batches" in err
    assert f"{n_batches}/{n_batches}" in err
    assert np.array_equal(shown, quiet)


def test_progress_bar_follows_the_log_level_by_default(tiny_encoder, capsys, caplog):
    tiny_encoder.encode([TEXT])
    assert "Batches" not in capsys.readouterr().err
    caplog.set_level(logging.INFO, logger="sbert_core.inference.encoder")
    tiny_encoder.encode([TEXT])
    assert "Batches" in capsys.readouterr().err


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"batch_size": 3},
        {"normalize_embeddings": True, "truncate_dim": 16},
        {"convert_to_tensor": True},
        {"convert_to_numpy": False},
        {"convert_to_tensor": True, "normalize_embeddings": True, "truncate_dim": 8},
    ],
    ids=lambda kwargs: ",".join(kwargs) or "defaults",
)
@pytest.mark.parametrize("single", [True, False], ids=["str", "list"])
def test_matches_sentence_transformers_encode(tiny_encoder, oracle, sample_texts, kwargs, single):
    texts = TEXT if single else sample_texts
    ours = tiny_encoder.encode(texts, **kwargs)
    theirs = oracle.encode(texts, **kwargs)
    assert type(ours) is type(theirs)
    if isinstance(theirs, list):
        assert len(ours) == len(theirs)
        assert all(type(row) is type(other) for row, other in zip(ours, theirs, strict=True))
    ours, theirs = _as_numpy(ours), _as_numpy(theirs)
    assert ours.shape == theirs.shape
    assert ours.dtype == theirs.dtype
    assert np.abs(ours - theirs).max() <= 1e-5


@pytest.mark.parametrize("method", ["encode_query", "encode_document"])
@pytest.mark.parametrize("single", [True, False], ids=["str", "list"])
def test_encode_query_and_document_match_sentence_transformers(
    prompt_dir, sample_texts, method, single
):
    ours_model = SentenceEncoder.load(prompt_dir, device="cpu")
    theirs_model = SentenceTransformer(str(prompt_dir), device="cpu")
    texts = TEXT if single else sample_texts
    ours = getattr(ours_model, method)(texts, normalize_embeddings=True, truncate_dim=16)
    theirs = getattr(theirs_model, method)(texts, normalize_embeddings=True, truncate_dim=16)
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= 1e-5
    # The prompt is really applied: without it the vectors differ.
    plain = ours_model.encode(texts, normalize_embeddings=True, truncate_dim=16)
    assert np.abs(ours - plain).max() > 1e-3


@pytest.mark.parametrize("method", ["encode", "encode_query", "encode_document"])
def test_unknown_keyword_is_a_type_error_naming_it(tiny_encoder, method):
    with pytest.raises(TypeError, match="normalise_embeddings"):
        getattr(tiny_encoder, method)(TEXT, normalise_embeddings=True)


def test_non_text_input_is_a_type_error(tiny_encoder):
    with pytest.raises(TypeError, match="a string or a sequence of strings, got int"):
        tiny_encoder.encode(3)


def test_encode_detailed_refuses_a_single_string(tiny_encoder):
    with pytest.raises(TypeError, match=r"single string \(encode\(\) takes one string"):
        tiny_encoder.encode_detailed(TEXT)
