"""Bytes of float32 vectors, for the stages' memory counts (what the process already holds is
``sbert_pipeline.io.resources.resident_bytes``). numpy-free."""

from __future__ import annotations

FLOAT32_BYTES = 4


def vector_bytes(rows: int, dim: int) -> int:
    """Bytes of ``rows`` float32 vectors of dimension ``dim``."""
    return FLOAT32_BYTES * rows * dim
