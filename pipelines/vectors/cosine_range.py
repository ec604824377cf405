"""Cosine similarities as stored: inside [-1, 1].

The inner product of two unit float32 vectors can round past the range (a vector with itself
gives 1.0000001), and readers rightly expect a cosine to be at most 1. Every output that stores
a cosine (pairs/, neighbors/, assignments/, groups.parquet, search hits) passes its scores
through :func:`clamp_cosines` just before they are written. Beam-free: numpy only.
"""

from __future__ import annotations

import numpy as np


def clamp_cosines(scores: np.ndarray) -> np.ndarray:
    """``scores`` as float32 clipped to [-1, 1]; NaN (an unknown score) stays NaN.

    Example:
        >>> clamp_cosines(np.array([1.0000001, -1.5, 0.25, np.nan], np.float32)).tolist()
        [1.0, -1.0, 0.25, nan]
    """
    return np.clip(np.asarray(scores, dtype=np.float32), np.float32(-1.0), np.float32(1.0))
