"""``centroids.npy`` (float32, never pickled) on any Beam filesystem."""

from __future__ import annotations

import io

import numpy as np
from sbert_pipeline.io.filesystems import FileSystems

CENTROIDS = "centroids.npy"


def save_centroids(path: str, centroids: np.ndarray) -> None:
    """Write ``centroids.npy`` (float32, no pickle) on any Beam filesystem."""
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(centroids, dtype=np.float32), allow_pickle=False)
    with FileSystems.create(path, mime_type="application/octet-stream") as handle:
        handle.write(buffer.getvalue())


def load_centroids(path: str) -> np.ndarray:
    """Read ``centroids.npy`` from any Beam filesystem."""
    with FileSystems.open(path) as handle:
        return np.load(io.BytesIO(handle.read()), allow_pickle=False)
