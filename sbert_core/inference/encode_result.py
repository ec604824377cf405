"""What :meth:`SentenceEncoder.encode_detailed
<sbert_core.inference.encoder.SentenceEncoder.encode_detailed>`
returns: the embeddings with each text's token count and truncation flag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch


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

    def converted(
        self, device: torch.device, *, to_tensor: bool, to_numpy: bool
    ) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """The embeddings as ``encode`` returns them: the float32 array, one tensor on ``device``
        (``to_tensor``; sentence-transformers leaves tensors on the model's device), or, with
        neither, a list of ``(d,)`` tensors."""
        if not to_tensor and to_numpy:
            return self.embeddings
        import torch  # loaded already wherever a tensor is asked for

        tensor = torch.from_numpy(self.embeddings).to(device)
        return tensor if to_tensor else list(tensor)
