import numpy as np
import pytest
from sentence_transformers.sentence_transformer.evaluation import BinaryClassificationEvaluator
from sklearn.metrics import average_precision_score

from sbert_core.evaluation.pair_metrics import average_precision, best_f1


@pytest.mark.parametrize("seed", range(5))
def test_matches_sklearn_and_sentence_transformers_with_ties(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=300), 1)  # rounding creates many ties
    labels = (scores + rng.normal(scale=1.0, size=300) > 0.5).astype(int)
    assert average_precision(scores, labels) == pytest.approx(
        average_precision_score(labels, scores)
    )
    theirs = BinaryClassificationEvaluator.find_best_f1_and_threshold(scores, labels, True)
    ours = best_f1(scores, labels)
    assert (ours.f1, ours.precision, ours.recall, ours.threshold) == pytest.approx(theirs)


def test_perfect_ranking():
    result = best_f1([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0])
    assert (result.f1, result.threshold) == (1.0, pytest.approx(0.55))
    assert average_precision([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0]) == 1.0


def test_no_positives_is_an_error():
    with pytest.raises(ValueError, match="no positive pairs"):
        best_f1([0.1, 0.2], [0, 0])
