"""Scoring an encoder on held-out data: the metrics of the paper's tables and of fine-tuning.

- :class:`STSEvaluator`: Spearman and Pearson correlations x 100 between a similarity of the two
  sentence embeddings and the gold score, for cosine similarity (the paper's headline metric),
  negative Manhattan and negative Euclidean distance, and the dot product; the numbers match
  sentence-transformers' ``EmbeddingSimilarityEvaluator``.
- :class:`SimilarityClassificationEvaluator`: labelled pairs (paraphrase or not) classified by
  thresholding their embedding similarity: average precision and the best-F1 threshold, as
  sentence-transformers' ``BinaryClassificationEvaluator`` reports them.
- :class:`SoftmaxClassificationEvaluator`: accuracy of the classifier head a softmax loss trains
  (NLI labels), and :class:`TripletEvaluator`: how often an anchor is nearer its positive.

:func:`build_evaluator` picks the one that fits a dev or test set for fine-tuning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr
from torch import nn

from sbert_core.errors import DataFileError
from sbert_core.evaluation.pair_metrics import average_precision, best_f1
from sbert_core.inference.encoder import SentenceEncoder
from sbert_core.tabular import float_column, read_table, text_column

SIMILARITIES = ("cosine", "manhattan", "euclidean", "dot")

# A callable on the encoder returning a dict of metrics, with a ``primary_metric`` attribute
# naming the one to compare models by.
Evaluator = Callable[..., dict]


# Evaluation sits below training: it names what it reads from training's examples and softmax
# loss by the attributes it uses, so it never imports sbert_core.training.
class Examples(Protocol):
    """Examples stored by column (training's ``ExampleSet`` is one)."""

    kind: str  # "scored_pairs", "labelled_pairs", "triplets" or "pairs"
    texts: tuple[tuple[str, ...], ...]  # one tuple of strings per text column
    targets: np.ndarray | None  # (N,) scores or label indices
    source: str  # where the examples were read from, for messages

    def __len__(self) -> int: ...


@runtime_checkable
class PairClassifier(Protocol):
    """A classifier head over a pair's embeddings (training's ``SoftmaxLoss`` is one)."""

    classifier: nn.Linear

    def logits(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``(N, k)`` class logits of the pairs ``(u[i], v[i])``."""
        ...


def paired_similarities(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """Similarity of row i of ``a`` with row i of ``b`` under each measure in ``SIMILARITIES``.

    Args:
        a, b: ``(N, d)`` embeddings.

    Returns:
        ``{name: (N,) float64}``; distances are negated so that larger always means more similar.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return {
        "cosine": _row_cosine(a, b),
        "manhattan": -np.abs(a - b).sum(axis=1),
        "euclidean": -np.linalg.norm(a - b, axis=1),
        "dot": np.einsum("nd,nd->n", a, b),
    }


def _row_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cosine similarity of row i of ``a`` with row i of ``b``: ``(N,)`` in their dtype."""
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("nd,nd->n", a, b) / np.maximum(norms, 1e-12)


def sts_correlations(a: np.ndarray, b: np.ndarray, gold: Sequence[float]) -> dict[str, float]:
    """Spearman and Pearson x 100 for every similarity measure: ``{"cosine_spearman": ...}``."""
    gold = np.asarray(gold, dtype=np.float64)
    if len(gold) < 2:
        raise ValueError("need at least two scored pairs to compute a correlation")
    metrics = {}
    for name, scores in paired_similarities(a, b).items():
        metrics[f"{name}_spearman"] = float(spearmanr(gold, scores).statistic * 100)
        metrics[f"{name}_pearson"] = float(pearsonr(gold, scores).statistic * 100)
    return metrics


def encode_text_columns(
    encoder: SentenceEncoder, columns: Sequence[Sequence[str]], **encode_kwargs
) -> list[np.ndarray]:
    """Embeddings ``(N, d)`` of each column of N texts, encoding each distinct text once."""
    unique = list(dict.fromkeys(text for column in columns for text in column))
    position = {text: i for i, text in enumerate(unique)}
    embeddings = encoder.encode(unique, **encode_kwargs)
    return [embeddings[[position[text] for text in column]] for column in columns]


@dataclass
class STSEvaluator:
    """Scores an encoder on sentence pairs with gold similarity scores.

    Calling it returns a dict of metrics; ``primary_metric`` names the one to compare models by.

    Example:
        >>> evaluator = STSEvaluator.from_file("../shared/data/stsb/test.tsv.gz")
        >>> evaluator(SentenceEncoder.load())["cosine_spearman"]  # doctest: +SKIP
        82.03...
    """

    sentences1: list[str]
    sentences2: list[str]
    scores: list[float]
    name: str = "sts"
    primary_metric: str = "cosine_spearman"

    def __post_init__(self) -> None:
        if not len(self.sentences1) == len(self.sentences2) == len(self.scores):
            raise ValueError("sentences1, sentences2 and scores must have the same length")

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        score_col: str = "score",
        s1_col: str = "sentence1",
        s2_col: str = "sentence2",
        fmt: str | None = None,
    ) -> STSEvaluator:
        """Read pairs from TSV/CSV/JSONL/Parquet (gzip allowed); errors name file, row, column."""
        table = read_table(path, fmt)
        table.require([score_col, s1_col, s2_col])
        return cls(
            sentences1=text_column(table, s1_col),
            sentences2=text_column(table, s2_col),
            scores=float_column(table, score_col),
            name=Path(path).name,
        )

    def __call__(self, encoder, **encode_kwargs) -> dict[str, float]:
        """Encode each distinct sentence once and return the correlation metrics."""
        a, b = encode_text_columns(encoder, (self.sentences1, self.sentences2), **encode_kwargs)
        metrics = sts_correlations(a, b, self.scores)
        metrics["n_pairs"] = len(self.scores)
        return metrics


@dataclass
class SimilarityClassificationEvaluator:
    """Scores an encoder on labelled pairs (paraphrase or not) classified by their similarity.

    Returns, per similarity measure, average precision and the best F1 with its precision,
    recall and threshold (x 100 except thresholds), as sentence-transformers'
    ``BinaryClassificationEvaluator`` reports them. ``primary_metric`` is ``cosine_ap``.
    """

    sentences1: list[str]
    sentences2: list[str]
    labels: list[int]
    name: str = "pairs"
    primary_metric: str = "cosine_ap"

    def __post_init__(self) -> None:
        if not len(self.sentences1) == len(self.sentences2) == len(self.labels):
            raise ValueError("sentences1, sentences2 and labels must have the same length")

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        *,
        label_col: str = "label",
        s1_col: str = "sentence1",
        s2_col: str = "sentence2",
        positive_min: float | None = None,
        fmt: str | None = None,
    ) -> SimilarityClassificationEvaluator:
        """Read pairs; labels are 0/1, or scores where ``score >= positive_min`` means positive.

        Raises:
            DataFileError: missing columns, empty texts, or a label that is not 0/1 (or numeric
                with ``positive_min``), naming file, row and column.
        """
        table = read_table(path, fmt)
        table.require([label_col, s1_col, s2_col])
        values = float_column(table, label_col)
        if positive_min is None:
            for row, value in enumerate(values, start=1):
                if value not in (0.0, 1.0):
                    raise DataFileError(
                        f"{table.path}: row {row}, column {label_col!r}: label {value} is not 0 "
                        "or 1 (pass a positive threshold to read scores as labels)"
                    )
            labels = [int(value) for value in values]
        else:
            labels = [int(value >= positive_min) for value in values]
        return cls(text_column(table, s1_col), text_column(table, s2_col), labels, Path(path).name)

    def __call__(self, encoder, **encode_kwargs) -> dict[str, float]:
        """Encode each distinct sentence once and return the metrics."""
        a, b = encode_text_columns(encoder, (self.sentences1, self.sentences2), **encode_kwargs)
        metrics: dict[str, float] = {"n_pairs": len(self.labels), "n_positive": sum(self.labels)}
        for name, scores in paired_similarities(a, b).items():
            f1 = best_f1(scores, self.labels)
            metrics[f"{name}_ap"] = average_precision(scores, self.labels) * 100
            metrics[f"{name}_f1"] = f1.f1 * 100
            metrics[f"{name}_precision"] = f1.precision * 100
            metrics[f"{name}_recall"] = f1.recall * 100
            metrics[f"{name}_f1_threshold"] = f1.threshold
        return metrics


class SoftmaxClassificationEvaluator:
    """Accuracy (%) of a softmax loss's classifier on labelled sentence pairs."""

    primary_metric = "accuracy"

    def __init__(self, examples: Examples, loss: PairClassifier, name: str = "") -> None:
        self.examples = examples
        self.loss = loss
        self.name = name or examples.source

    def __call__(self, encoder: SentenceEncoder, **encode_kwargs) -> dict[str, float]:
        """Classify every pair and compare with the gold labels."""
        u, v = encode_text_columns(encoder, self.examples.texts, **encode_kwargs)
        weight = self.loss.classifier.weight
        with torch.inference_mode():
            logits = self.loss.logits(
                torch.from_numpy(u).to(weight.device), torch.from_numpy(v).to(weight.device)
            )  # (N, k)
        predicted = logits.argmax(dim=1).cpu().numpy()
        accuracy = float((predicted == self.examples.targets).mean() * 100)
        return {"accuracy": accuracy, "n_pairs": len(self.examples)}


class TripletEvaluator:
    """How often (%) an anchor is nearer its positive than its negative, by cosine and Euclid."""

    primary_metric = "cosine_accuracy"

    def __init__(self, examples: Examples, name: str = "") -> None:
        self.examples = examples
        self.name = name or examples.source

    def __call__(self, encoder: SentenceEncoder, **encode_kwargs) -> dict[str, float]:
        """Embed every triplet and count the ones ordered correctly."""
        anchors, positives, negatives = encode_text_columns(
            encoder, self.examples.texts, **encode_kwargs
        )
        by_cosine = _row_cosine(anchors, positives) > _row_cosine(anchors, negatives)
        by_euclid = np.linalg.norm(anchors - positives, axis=1) < np.linalg.norm(
            anchors - negatives, axis=1
        )
        return {
            "cosine_accuracy": float(by_cosine.mean() * 100),
            "euclidean_accuracy": float(by_euclid.mean() * 100),
            "n_triplets": len(self.examples),
        }


def build_evaluator(examples: Examples, loss: nn.Module | None = None, name: str = "") -> Evaluator:
    """The metric for a dev or test set: STS correlations for scored pairs, the softmax head's
    accuracy for labelled pairs, triplet accuracy for triplets.

    Raises:
        ValueError: labelled pairs without a softmax loss, or plain pairs (no metric).
    """
    name = name or Path(examples.source).name
    if examples.kind == "scored_pairs":
        first, second = examples.texts
        return STSEvaluator(list(first), list(second), examples.targets.tolist(), name=name)
    if examples.kind == "labelled_pairs":
        if not isinstance(loss, PairClassifier):
            raise ValueError(
                f"{examples.source}: labelled pairs are scored by the softmax classifier, "
                "which only the softmax loss trains"
            )
        return SoftmaxClassificationEvaluator(examples, loss, name)
    if examples.kind == "triplets":
        return TripletEvaluator(examples, name)
    raise ValueError(
        f"{examples.source}: {examples.kind} have no metric; evaluate on triplets or scored pairs"
    )
