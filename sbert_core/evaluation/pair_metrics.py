"""Binary pair classification metrics: average precision and the best-F1 threshold.

Definitions follow sentence-transformers' ``BinaryClassificationEvaluator`` (and scikit-learn's
``average_precision_score``) so numbers can be compared directly: pairs are ranked by score,
highest first; tied scores are one step of the ranking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BestF1:
    """The F1-maximising cut of a ranking, and where to put the threshold."""

    f1: float
    precision: float
    recall: float
    threshold: float


def _ranked(scores, labels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    if scores.shape != labels.shape or scores.ndim != 1:
        raise ValueError("scores and labels must be 1-d and of the same length")
    if not labels.any():
        raise ValueError("no positive pairs: average precision and F1 are undefined")
    order = np.argsort(-scores, kind="stable")
    sorted_scores = scores[order]
    # Last position of each run of equal scores: a threshold cannot split a tie.
    ends = np.flatnonzero(np.r_[sorted_scores[1:] != sorted_scores[:-1], True])
    return sorted_scores, np.cumsum(labels[order]), ends


def average_precision(scores, labels) -> float:
    """AP: sum over distinct thresholds of (recall step) x precision, as in scikit-learn."""
    _, true_positives, ends = _ranked(scores, labels)
    tp = true_positives[ends].astype(np.float64)
    precision = tp / (ends + 1)
    recall = tp / tp[-1]
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def best_f1(scores, labels) -> BestF1:
    """The cut with the highest F1; the threshold sits half-way to the next lower score."""
    sorted_scores, true_positives, ends = _ranked(scores, labels)
    tp = true_positives[ends].astype(np.float64)
    precision = tp / (ends + 1)
    recall = tp / true_positives[-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(tp > 0, 2 * precision * recall / (precision + recall), 0.0)
    best = int(np.argmax(f1))  # first maximum, like a strict ">" scan from the top
    end = ends[best]
    is_last = end == len(sorted_scores) - 1
    threshold = sorted_scores[end] if is_last else (sorted_scores[end] + sorted_scores[end + 1]) / 2
    if not is_last and threshold == sorted_scores[end + 1]:  # midpoint lost to rounding
        threshold = sorted_scores[end]
    return BestF1(float(f1[best]), float(precision[best]), float(recall[best]), float(threshold))
