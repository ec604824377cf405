"""Keep only the labelled pairs a verifier will be asked about: those whose cosine by a
bi-encoder lies in a band.

In retrieve-then-verify the cross-encoder scores only the candidate pairs, those the
bi-encoder puts at or above the pairs stage's threshold (and below verify's band top, if one
is set). A cross-encoder trained on just those pairs spends every step on the decisions it
will be asked to make, and far fewer steps: on the QQP recipe 45,584 of the 107,933 labelled
pairs (42%) lie at cosine >= 0.8. A ``cosine_band`` section on a cross-encoder's ``train`` (or
``dev``/``test``) spec says which bi-encoder and which band::

    cosine_band: {model: all-MiniLM-L6-v2, low: 0.8}      # the job's model and pairs.threshold

The pairs' texts are embedded once at data-preparation time (each distinct text once), in
the precision training runs in, and each pair is kept when ``low <= cosine < high``
(:func:`~sbert_core.training.cross_encoder_data.keep_in_band`). This module is the setting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sbert_core.model.source import DEFAULT_MODEL


@dataclass
class CosineBand:
    """``cosine_band`` of a cross-encoder's data spec (module docstring).

    Attributes:
        model: the bi-encoder whose cosine decides (the job's ``model``).
        low: keep pairs at or above this cosine (the job's ``pairs.threshold``).
        high: and below this one (verify's band top; None: no upper edge).
    """

    model: str = DEFAULT_MODEL
    low: float = -1.0
    high: float | None = None

    def check(self, key: str) -> None:
        """Raise ``ValueError`` naming ``key`` (``train.cosine_band``) for a band that is not
        one: an edge outside [-1, 1], or ``high`` not above ``low``."""
        if not -1.0 <= self.low <= 1.0:
            raise ValueError(f"{key}.low must lie in [-1, 1], got {self.low}")
        if self.high is not None and not self.low < self.high <= 1.0:
            raise ValueError(f"{key}.high must lie in ({self.low}, 1], got {self.high}")

    def edges(self) -> str:
        """The band as an interval: ``[0.8, 1]`` or ``[0.8, 0.9)``."""
        return f"[{self.low:g}, 1]" if self.high is None else f"[{self.low:g}, {self.high:g})"

    def contains(self, cosines: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: the cosines inside the band."""
        inside = cosines >= self.low
        return inside if self.high is None else inside & (cosines < self.high)
