"""Precision and threading helpers shared by the vector kernels (k-means, all-pairs)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import numpy as np

Precision = Literal["auto", "bfloat16", "float32"]


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """Unit-length float32 rows (a new array); all-zero rows stay zero rather than NaN."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, np.float32(1e-12))


def use_bf16(precision: Precision) -> bool:
    """Whether candidate search runs in bf16: asked for, or ``auto`` on a CPU with bf16 units."""
    if precision not in ("auto", "bfloat16", "float32"):
        raise ValueError(f"precision must be auto, bfloat16 or float32, got {precision!r}")
    # imported here (as torch below): the pairs launcher reads its vectors through this module
    # while torch loads in parallel
    from sbert_core.inference.precision import cpu_has_fast_bf16

    return precision == "bfloat16" or (precision == "auto" and cpu_has_fast_bf16())


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread, where handing work to a thread pool costs more than it saves:
    many small sequential steps (on two shared cores, k-means++ for k = 100 took 4.5 s on two
    threads and 0.05 s on one), memory-bound scatters, and bookkeeping on small tensors (on a
    loaded machine every parallel op waits for a descheduled thread: 20 ms per op measured).
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
