"""Scoring a cross-encoder on labelled pairs: average precision and the best-F1 threshold.

The pairs are ranked by the model's score (after its activation, what ``predict`` returns and
what a threshold is set on); a pair with target 0.5 or more counts as a positive. The metrics
are :mod:`sbert_core.evaluation.pair_metrics`' (sentence-transformers'
``BinaryClassificationEvaluator`` definitions), so they compare with the bi-encoder's.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from sbert_core.evaluation.pair_metrics import average_precision, best_f1
from sbert_core.inference.cross_encoder import CrossEncoder
from sbert_core.training.cross_encoder_data import binary_labels
from sbert_core.training.data import ExampleSet

logger = logging.getLogger(__name__)


class PairScoreEvaluator:
    """AP and best F1 of a cross-encoder's scores on labelled pairs.

    Example:
        >>> evaluator = PairScoreEvaluator(load_cross_encoder_pairs(spec), name="holdout")
        >>> evaluator(model)["ap"]
        0.87

    Attributes:
        name: how the set is named in manifests and cards.
        primary_metric: ``ap``, which picks the best weights with a dev set.
    """

    primary_metric = "ap"

    def __init__(self, examples: ExampleSet, name: str = "", batch_size: int = 64) -> None:
        """Raises ``ValueError`` for pairs without a positive (AP and F1 are undefined)."""
        self.pairs = list(zip(*examples.texts, strict=True))
        self.labels = binary_labels(examples)
        if not self.labels.any():
            raise ValueError(f"{examples.source}: no positive pair (target >= 0.5) to score")
        self.name = name or examples.source
        self.batch_size = batch_size

    def __call__(self, model: CrossEncoder) -> dict:
        """``ap``, ``f1``, ``precision``, ``recall``, ``threshold`` (the score above which a
        pair is called positive at the best F1), ``n_pairs`` and ``n_positive``."""
        start = time.perf_counter()
        scores = np.asarray(model.predict(self.pairs, batch_size=self.batch_size), np.float64)
        best = best_f1(scores, self.labels)
        metrics = {
            "ap": average_precision(scores, self.labels),
            "f1": best.f1,
            "precision": best.precision,
            "recall": best.recall,
            "threshold": best.threshold,
            "n_pairs": len(self.pairs),
            "n_positive": int(self.labels.sum()),
        }
        logger.info(
            "%s: %d pairs scored in %.0f s: AP %.4f, best F1 %.4f at %.4f",
            self.name,
            len(self.pairs),
            time.perf_counter() - start,
            metrics["ap"],
            metrics["f1"],
            metrics["threshold"],
        )
        return metrics
