"""What :meth:`SentenceEncoder.encode_detailed
<sbert_core.inference.encoder.SentenceEncoder.encode_detailed>`
returns: the embeddings with each text's token count and truncation flag."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EncodeResult:
    """Embeddings plus per-text token counts and truncation flags, in input order."""

    embeddings: np.ndarray  # (N, d) float32
    n_tokens: np.ndarray  # (N,) int32
    truncated: np.ndarray  # (N,) bool

    @property
    def n_truncated(self) -> int:
        """How many inputs were cut at ``max_seq_length``."""
        return int(self.truncated.sum())
