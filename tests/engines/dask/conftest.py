"""Fixtures of the Dask engine tests: the corpus (``engine_jobs.py``) and a tiny cross-encoder."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_jobs import write_corpus
from testdata import build_tiny_bert

# 60 near-duplicates of six sentences and 60 texts of their own: two partitions per worker.
DASK_ROWS = 120


@pytest.fixture(scope="session")
def dask_corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("dask_corpus") / "corpus.jsonl", DASK_ROWS)


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A random BERT sequence classifier with one label (a cross-encoder)."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    root = tmp_path_factory.mktemp("dask_ce")
    base = build_tiny_bert(root / "base")
    config = AutoConfig.from_pretrained(base, num_labels=1, initializer_range=0.2)
    torch.manual_seed(1)
    AutoModelForSequenceClassification.from_config(config).eval().save_pretrained(root / "ce")
    AutoTokenizer.from_pretrained(base).save_pretrained(root / "ce")
    return root / "ce"
