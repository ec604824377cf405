"""Builders for test models and readers for the shared data, importable from any test module."""

from __future__ import annotations

import csv
import gzip
import os
import string
from pathlib import Path

DATA_DIR = Path(
    os.environ.get("SBERT_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data")
)

_WORDS = (
    "the a an is are was of to and in on with for man woman dog cat plays playing guitar music "
    "runs running eats food red blue green car road sky sun rain house tree question answer "
    "how what why where who when do does can i you we they it this that"
).split()


# Short and long texts (the long one passes the tiny models' 48-token limit), punctuation, case.
SAMPLE_TEXTS = [
    "a man plays the guitar",
    "A woman is eating food.",
    "the dog runs on the road in the rain",
    "how do i play music?",
    "sky",
    "Why is the sky blue and the sun red?",
    "the cat and the dog and the man and the woman " * 6,
    "Quick brown foxes jump; 42 times!",
]


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
    tokenizer = BertTokenizerFast(
        vocab={token: i for i, token in enumerate(vocab)}, do_lower_case=True
    )
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


def read_tsv(path: Path) -> list[dict[str, str]]:
    """Read one of the shared gzip TSV files (quoting off)."""
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
