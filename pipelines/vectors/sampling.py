"""How many rows a k-means fit samples: one rule for ``sbert cluster`` and ``sbert pairs``.

A fit wants ``per_cluster`` rows per centroid and at least ``minimum``, but never more than
``max_bytes`` of float32 vectors (the launcher holds the sample) nor more than the rows there are.
"""

from __future__ import annotations

import numpy as np

SAMPLE_BYTES = 2 * 1024**3  # the launcher's copy of the sample, at most


def sample_size(
    n: int,
    dim: int,
    clusters: int,
    *,
    per_cluster: int,
    minimum: int,
    requested: int | None = None,
    clusters_option: str = "--clusters",
    max_bytes: int = SAMPLE_BYTES,
) -> int:
    """The sample size: ``requested`` (at least the clusters) clamped to ``n``, or the default.

    Raises:
        ValueError: ``requested`` is smaller than ``clusters``, naming ``--sample`` and
            ``clusters_option``.
    """
    if requested is not None:
        if requested < clusters:
            raise ValueError(f"--sample {requested} is smaller than {clusters_option} {clusters}")
        return min(requested, n)
    cap = max(clusters, max_bytes // (4 * dim))
    return min(n, cap, max(per_cluster * clusters, minimum))


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """``size`` distinct row numbers of ``n``, sorted, the same on every rerun."""
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
