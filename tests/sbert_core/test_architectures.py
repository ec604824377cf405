"""Parity with sentence-transformers for every supported architecture, on tiny random models.

For each architecture: a folder saved by sentence-transformers (its usual head: sentence-t5's
mean + Dense + Normalize, last-token pooling for the decoders, mean + Normalize otherwise) must
give the same vectors here and there, with and without a prompt and truncated; and our save must
load in sentence-transformers and back here to the same vectors.
"""

from __future__ import annotations

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from tiny_models import BUILDERS, TEXTS, TYPICAL_HEADS, st_folder

from sbert_core import SentenceEncoder

TOLERANCE = 1e-5


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def architecture(request, tmp_path_factory):
    """(name, sentence-transformers folder, oracle, our encoder) for one architecture."""
    name = request.param
    root = tmp_path_factory.mktemp(name)
    hf_dir = BUILDERS[name](root / "hf")
    st_dir = st_folder(hf_dir, root / "st", **TYPICAL_HEADS.get(name, {"pooling": "mean"}))
    oracle = SentenceTransformer(str(st_dir), device="cpu")
    return name, st_dir, oracle, SentenceEncoder.load(st_dir, device="cpu")


def _max_diff(ours: np.ndarray, theirs: np.ndarray) -> float:
    assert ours.shape == theirs.shape
    return float(np.abs(ours - theirs).max())


def test_matches_sentence_transformers(architecture):
    _, _, oracle, ours = architecture
    expected = oracle.encode(TEXTS, batch_size=4)
    assert _max_diff(ours.encode(TEXTS, batch_size=3), expected) <= TOLERANCE
    # Vectors differ between texts, so agreement is not a constant output agreeing.
    assert np.abs(expected[0] - expected[1]).max() > 1e-3


def test_prompt_matches_sentence_transformers(architecture):
    _, _, oracle, ours = architecture
    expected = oracle.encode(TEXTS, prompt="query: ")
    assert _max_diff(ours.encode(TEXTS, prompt="query: "), expected) <= TOLERANCE
    assert np.abs(expected - oracle.encode(TEXTS)).max() > 1e-4  # the prompt changed something


def test_truncate_dim_matches_sentence_transformers(architecture):
    _, _, oracle, ours = architecture
    dim = ours.dim // 2
    for normalize in (False, True):
        expected = oracle.encode(TEXTS, truncate_dim=dim, normalize_embeddings=normalize)
        got = ours.encode(TEXTS, truncate_dim=dim, normalize=True if normalize else None)
        assert _max_diff(got, expected) <= TOLERANCE


def test_save_loads_in_sentence_transformers_and_back(architecture, tmp_path):
    _, _, _, ours = architecture
    expected = ours.encode(TEXTS)
    saved = ours.save(tmp_path / "saved")
    theirs = SentenceTransformer(str(saved), device="cpu")
    assert type(theirs[0].model).__name__ == type(ours.transformer).__name__
    assert _max_diff(theirs.encode(TEXTS), expected) <= TOLERANCE
    again = SentenceEncoder.load(saved, device="cpu")
    assert _max_diff(again.encode(TEXTS), expected) <= TOLERANCE
    assert again.tokenizer.padding_side == ours.tokenizer.padding_side


def test_decoders_pad_on_the_tokenizers_side(architecture):
    name, _, _, ours = architecture
    expected = "left" if name.startswith("qwen") else "right"
    assert ours.tokenizer.padding_side == expected
    features = ours.pad([[5, 6, 7], [8]])
    mask = features["attention_mask"].tolist()
    assert mask[1] == ([0, 0, 1] if expected == "left" else [1, 0, 0])
