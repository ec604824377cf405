"""What a grouping removes, in the figures every run states: the group-size distribution, the
share of rows removed and the removed rows below the threshold to their kept row (Beam-free)."""

from __future__ import annotations

import numpy as np
from sbert_pipeline.grouping.model import SAME_TEXT, Grouping

# The group-size bins of the distribution: (least, most or None, name).
SIZE_BINS: tuple[tuple[int, int | None, str], ...] = (
    (2, 2, "2"),
    (3, 5, "3-5"),
    (6, 20, "6-20"),
    (21, 100, "21-100"),
    (101, None, ">100"),
)


def size_distribution(sizes: np.ndarray) -> dict[str, int]:
    """``{"2": groups of 2, "3-5": ..., ">100": ...}``: how many groups of each size bin."""
    sizes = np.asarray(sizes, np.int64)
    top = np.iinfo(np.int64).max
    return {
        name: int(np.sum((sizes >= low) & (sizes <= (top if high is None else high))))
        for low, high, name in SIZE_BINS
    }


def distribution_text(distribution: dict[str, int]) -> str:
    """``"2: 40, 3-5: 7, 6-20: 1, 21-100: 0, >100: 0"``."""
    return ", ".join(f"{name}: {count}" for name, count in distribution.items())


def removed_share(removed: int, rows: int) -> float:
    """The share of ``rows`` removed (0 for no rows), rounded to 6 decimals."""
    return round(removed / rows, 6) if rows else 0.0


def removed_below(grouping: Grouping, threshold: float, rows: int | None = None) -> int:
    """Removed rows (of the first ``rows``, default all) whose score to their kept row is under
    ``threshold`` or not among the pairs (chained); copies of a normalised text do not count."""
    end = grouping.n if rows is None else rows
    removed = grouping.removed[:end] & (grouping.reason[:end] != SAME_TEXT)
    score = grouping.matched_score[:end]
    below = np.isnan(score) | (score < np.float32(threshold))
    return int(np.sum(removed & below))
