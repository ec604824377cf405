"""Which pairs the cross-encoder scores, the verified score of every pair, and how the scores
moved (Beam-free, numpy only).

The band ``[LOW, HIGH)`` is in cosines, compared in float32 as the pairs and dedup stages
compare scores with thresholds. A pair at or above HIGH is taken for a duplicate without scoring
(score :data:`ABOVE_SCORE`); a pair below LOW for a non-duplicate (score :data:`BELOW_SCORE`).
It stays in the output with its cosine, so nothing is silently lost, and is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The verified score of a pair at or above the band: always a duplicate.
ABOVE_SCORE = 1.0
# The verified score of a pair below the band: never a duplicate at a threshold above 0.
BELOW_SCORE = 0.0
# The score movement counts the pairs that cross this score, each way (the cross-encoder's
# Sigmoid puts its decision there).
MOVEMENT_CUT = 0.5


@dataclass(frozen=True)
class BandSplit:
    """Where each pair lies against the band; ``(n,)`` bool masks, one of them true per pair."""

    scored: np.ndarray  # LOW <= cosine < HIGH (every pair without a band)
    above: np.ndarray  # cosine >= HIGH
    below: np.ndarray  # cosine < LOW

    def counts(self) -> dict[str, int]:
        """``read``, ``scored``, ``above_band``, ``below_band`` (read = the other three)."""
        return {
            "read": len(self.scored),
            "scored": int(self.scored.sum()),
            "above_band": int(self.above.sum()),
            "below_band": int(self.below.sum()),
        }


def split_band(cosines: np.ndarray, band: tuple[float, float] | None) -> BandSplit:
    """The pairs to score (cosine in ``[LOW, HIGH)``) and those above and below the band.

    Example:
        >>> split_band(np.array([0.2, 0.5, 0.9], np.float32), (0.5, 0.9)).counts()
        {'read': 3, 'scored': 1, 'above_band': 1, 'below_band': 1}
    """
    cosines = np.asarray(cosines, np.float32)
    if band is None:
        none = np.zeros(len(cosines), bool)
        return BandSplit(np.ones(len(cosines), bool), none, none.copy())
    low, high = np.float32(band[0]), np.float32(band[1])
    above = cosines >= high
    below = ~above & (cosines < low)
    return BandSplit(~above & ~below, above, below)


def verified_scores(split: BandSplit, scored: np.ndarray) -> np.ndarray:
    """``(n,)`` float32: the cross-encoder's ``scored`` scores (in the order of the scored pairs)
    where the band was scored, :data:`ABOVE_SCORE` above it and :data:`BELOW_SCORE` below.

    Raises:
        ValueError: ``scored`` holds another number of scores than the band has pairs.
    """
    if len(scored) != int(split.scored.sum()):
        raise ValueError(
            f"{len(scored)} scores for the {int(split.scored.sum())} pairs in the band"
        )
    scores = np.full(len(split.scored), BELOW_SCORE, np.float32)
    scores[split.above] = ABOVE_SCORE
    scores[split.scored] = scored
    return scores


def score_movement(
    cosines: np.ndarray, scores: np.ndarray, *, cut: float = MOVEMENT_CUT
) -> dict[str, float | int | None]:
    """How the cross-encoder moved the scores of the pairs it scored.

    Args:
        cosines: ``(m,)`` the bi-encoder's scores of the scored pairs.
        scores: ``(m,)`` the cross-encoder's scores of the same pairs.
        cut: the score whose crossings are counted.

    Returns:
        ``pairs``; ``up`` (cosine below ``cut``, score at or above it) and ``down`` (the other
        way); ``mean_cosine``, ``mean_score`` and ``mean_abs_change`` (mean ``|score - cosine|``;
        None without pairs); ``cut``.
    """
    cosines = np.asarray(cosines, np.float64)
    scores = np.asarray(scores, np.float64)
    limit = np.float32(cut)
    was = cosines.astype(np.float32) >= limit
    now = scores.astype(np.float32) >= limit
    empty = len(scores) == 0
    return {
        "pairs": len(scores),
        "cut": cut,
        "up": int((~was & now).sum()),
        "down": int((was & ~now).sum()),
        "mean_cosine": None if empty else round(float(cosines.mean()), 6),
        "mean_score": None if empty else round(float(scores.mean()), 6),
        "mean_abs_change": None if empty else round(float(np.abs(scores - cosines).mean()), 6),
    }
