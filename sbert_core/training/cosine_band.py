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

Embedding every question again on every run is most of the preparation (146k train questions
of QQP). A ``duplicate_pairs`` spec can name the band model's vectors made once beforehand,
spelt as ``hard_negatives`` spells them (a float32 ``.npy``, one row per line of
``vector_ids``, which holds the question ids)::

    cosine_band: {model: all-MiniLM-L6-v2, low: 0.8, vectors: base.npy, vector_ids: ids.txt}

:class:`StoredVectors` then answers for the encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sbert_core.errors import DataFileError
from sbert_core.model.source import DEFAULT_MODEL
from sbert_core.training.hard_negatives import read_stored_vectors


@dataclass
class CosineBand:
    """``cosine_band`` of a cross-encoder's data spec (module docstring).

    Attributes:
        model: the bi-encoder whose cosine decides (the job's ``model``).
        low: keep pairs at or above this cosine (the job's ``pairs.threshold``).
        high: and below this one (verify's band top; None: no upper edge).
        vectors: ``model``'s vectors of the questions, made beforehand (a float32 ``.npy``,
            one row per line of ``vector_ids``); None: the texts are embedded here.
        vector_ids: the question ids of the rows of ``vectors``, one a line.
    """

    model: str = DEFAULT_MODEL
    low: float = -1.0
    high: float | None = None
    vectors: str | None = None
    vector_ids: str | None = None

    def check(self, key: str) -> None:
        """Raise ``ValueError`` naming ``key`` (``train.cosine_band``) for a band that is not
        one: an edge outside [-1, 1], or ``high`` not above ``low``."""
        if not -1.0 <= self.low <= 1.0:
            raise ValueError(f"{key}.low must lie in [-1, 1], got {self.low}")
        if self.high is not None and not self.low < self.high <= 1.0:
            raise ValueError(f"{key}.high must lie in ({self.low}, 1], got {self.high}")
        if (self.vectors is None) != (self.vector_ids is None):
            raise ValueError(f"{key}.vectors and vector_ids go together")

    def edges(self) -> str:
        """The band as an interval: ``[0.8, 1]`` or ``[0.8, 0.9)``."""
        return f"[{self.low:g}, 1]" if self.high is None else f"[{self.low:g}, {self.high:g})"

    def contains(self, cosines: np.ndarray) -> np.ndarray:
        """``(N,)`` bool: the cosines inside the band."""
        inside = cosines >= self.low
        return inside if self.high is None else inside & (cosines < self.high)


class StoredVectors:
    """The band model's vectors read from ``vectors``/``vector_ids``, answering as its encoder
    does (:meth:`encode`) for the texts of the questions they cover."""

    def __init__(self, band: CosineBand, ids: Sequence[str], texts: Sequence[str]) -> None:
        """Read the vectors of the questions ``ids`` (whose texts are ``texts``).

        Raises:
            DataFileError: unreadable files, or a row count that differs from the ids.
        """
        stored, row = read_stored_vectors(band.vectors, band.vector_ids, "cosine_band")
        self.source = band.vector_ids
        # One row per text (questions with one text share their model vector).
        self.row = {text: row[qid] for qid, text in zip(ids, texts, strict=True) if qid in row}
        self.stored = stored

    def encode(self, texts: Sequence[str], **_options) -> np.ndarray:
        """``(len(texts), d)`` float32 unit rows, as the encoder's ``normalize_embeddings``.

        Raises:
            DataFileError: a text whose question has no vector.
        """
        missing = [text for text in texts if text not in self.row]
        if missing:
            raise DataFileError(
                f"{self.source}: {len(missing)} questions of the pairs have no vector "
                f"(first {missing[0]!r})"
            )
        rows = np.asarray(self.stored[[self.row[text] for text in texts]], dtype=np.float32)
        return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
