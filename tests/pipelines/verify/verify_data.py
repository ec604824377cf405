"""Data of the verify stage's tests (here and in ``tests/jobs/test_run_verify.py``): a tiny
random cross-encoder, a small corpus, and a pairs folder made from it by ``sbert embed`` and
``sbert pairs`` with the tiny bi-encoder.

Nothing is downloaded: the cross-encoder is a random BERT sequence classifier built from a
config (``tests/testdata.py``), as in ``tests/sbert_core/test_cross_encoder.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from apache_beam.testing.test_pipeline import TestPipeline
from sbert_pipeline.jobs.stage_cli import run_command
from testdata import SAMPLE_TEXTS, build_tiny_bert

# 24 texts: the sample texts and a near copy of each of the first eight.
TEXTS = [*SAMPLE_TEXTS[:16], *(text.upper() + " !" for text in SAMPLE_TEXTS[:8])]
PAIRS_THRESHOLD = 0.5


def local_runner() -> TestPipeline:
    """A TestPipeline on the in-process FnApiRunner (never Prism, which downloads)."""
    return TestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True)


def build_cross_encoder(directory: Path, seed: int = 1, num_labels: int = 1) -> Path:
    """A Hugging Face BERT sequence classifier with random weights (one label: a cross-encoder
    with a Sigmoid), wide enough that scores spread (the default head gives every pair about
    0.5)."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    base = build_tiny_bert(directory.parent / f"{directory.name}_base")
    config = AutoConfig.from_pretrained(base, num_labels=num_labels, initializer_range=0.2)
    torch.manual_seed(seed)
    AutoModelForSequenceClassification.from_config(config).eval().save_pretrained(directory)
    AutoTokenizer.from_pretrained(base).save_pretrained(directory)
    return directory


def write_corpus(path: Path, texts: list[str]) -> Path:
    """A JSONL corpus, ids ``doc-N``."""
    path.write_text(
        "".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in enumerate(texts)),
        encoding="utf-8",
    )
    return path


def embed_and_pair(root: Path, model: Path, *, keep_text: bool = True) -> Path:
    """``TEXTS`` embedded with ``model`` and paired (exact, pairs >= PAIRS_THRESHOLD); the
    pairs folder."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(root / "corpus.jsonl", TEXTS)
    argv = ["--input", str(corpus), "--output", str(root / "embeddings")]
    argv += ["--model", str(model), "--id-field", "id", "--device", "cpu"]
    run_command("embed", argv + (["--keep-text"] if keep_text else []), pipeline=local_runner())
    pairs = ["--embeddings", str(root / "embeddings"), "--output", str(root / "pairs")]
    pairs += ["--k", "3", "--threshold", str(PAIRS_THRESHOLD), "--method", "exact"]
    run_command("pairs", pairs)
    return root / "pairs"
