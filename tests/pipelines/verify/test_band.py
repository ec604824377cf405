"""The band split, the verified scores and the score movement, against values worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from sbert_pipeline.verify.band import score_movement, split_band, verified_scores


def test_the_band_is_low_inclusive_high_exclusive_in_float32():
    cosines = np.array([0.1, 0.5, 0.7, 0.9, 0.95, 1.0], np.float32)
    split = split_band(cosines, (0.5, 0.9))
    assert split.scored.tolist() == [False, True, True, False, False, False]
    assert split.above.tolist() == [False, False, False, True, True, True]
    assert split.below.tolist() == [True, False, False, False, False, False]
    assert split.counts() == {"read": 6, "scored": 2, "above_band": 3, "below_band": 1}
    # 0.9 as a float64 edge is compared as the float32 the pairs hold: the pair at 0.9 is at HIGH.
    assert split_band(np.array([0.9], np.float32), (0.0, 0.9)).above.tolist() == [True]


def test_without_a_band_every_pair_is_scored():
    split = split_band(np.array([-1.0, 0.0, 1.0], np.float32), None)
    assert split.counts() == {"read": 3, "scored": 3, "above_band": 0, "below_band": 0}


def test_an_empty_band_sends_every_pair_above_or_below():
    split = split_band(np.array([0.2, 0.7, 0.8], np.float32), (0.7, 0.7))
    assert split.counts() == {"read": 3, "scored": 0, "above_band": 2, "below_band": 1}


def test_verified_scores_put_the_scores_in_the_band_and_the_rules_outside():
    cosines = np.array([0.1, 0.6, 0.95, 0.7], np.float32)
    split = split_band(cosines, (0.5, 0.9))
    scores = verified_scores(split, np.array([0.25, 0.75], np.float32))
    assert scores.dtype == np.float32 and scores.tolist() == [0.0, 0.25, 1.0, 0.75]
    with pytest.raises(ValueError, match="1 scores for the 2 pairs in the band"):
        verified_scores(split, np.array([0.5], np.float32))


def test_score_movement_counts_the_crossings_each_way():
    cosines = np.array([0.4, 0.6, 0.55, 0.3], np.float32)
    scores = np.array([0.9, 0.2, 0.7, 0.1], np.float32)
    moved = score_movement(cosines, scores)
    assert (moved["up"], moved["down"], moved["pairs"], moved["cut"]) == (1, 1, 4, 0.5)
    assert moved["mean_abs_change"] == pytest.approx((0.5 + 0.4 + 0.15 + 0.2) / 4, abs=1e-6)
    assert moved["mean_score"] == pytest.approx(0.475, abs=1e-6)
    empty = score_movement(np.zeros(0, np.float32), np.zeros(0, np.float32))
    assert empty["pairs"] == 0 and empty["mean_abs_change"] is None
