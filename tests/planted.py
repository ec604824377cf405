"""Planted vector data with known answers for the clustering tests."""

from __future__ import annotations

import numpy as np


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalised float32 rows."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def gaussian_mixture(
    n: int, k: int, dim: int, *, noise: float = 1.0, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit vectors around ``k`` random unit centres, cluster sizes uneven (lognormal).

    A member is ``normalize(centre + noise * g / sqrt(dim))`` with ``g`` standard normal, so its
    cosine to its centre is about ``1 / sqrt(1 + noise^2)`` while centres are nearly orthogonal.

    Returns:
        ``(vectors (n, dim) float32, true labels (n,))``.
    """
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((k, dim)))
    weights = rng.lognormal(0.0, 0.5, k)
    labels = rng.choice(k, size=n, p=weights / weights.sum())
    noise_scale = np.float32(noise / np.sqrt(dim))
    vectors = centres[labels] + noise_scale * rng.standard_normal((n, dim), dtype=np.float32)
    return unit_rows(vectors), labels


def overlapping_groups(seed: int = 0, dim: int = 64) -> np.ndarray:
    """About 2,000 unit vectors: tight groups of many sizes, some groups pairwise close (so
    communities overlap and the greedy order matters), and unrelated background vectors."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(4, 80, 36)
    centres = unit_rows(rng.standard_normal((len(sizes), dim)))
    # Every third group sits next to the previous one (centre cosine about 0.9).
    for i in range(1, len(sizes), 3):
        centres[i] = unit_rows(centres[i - 1] + 0.5 * unit_rows(rng.standard_normal((1, dim))))[0]
    groups = [
        centres[i] + 0.45 / np.sqrt(dim) * rng.standard_normal((size, dim))
        for i, size in enumerate(sizes)
    ]
    background = rng.standard_normal((2000 - int(sizes.sum()), dim))
    vectors = unit_rows(np.concatenate([*groups, background]))
    return vectors[rng.permutation(len(vectors))]
