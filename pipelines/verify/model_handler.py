"""Beam ``ModelHandler`` around the cross-encoder: text pairs in, one score each out.

As embed's handler does for texts, on the stages' shared handler base: the cross-encoder is
loaded in ``load_model`` on the worker, never pickled with the pipeline. ``BatchElements``
hands it large batches; inside each, ``CrossEncoder.predict`` sorts the pairs by token length
and runs ``batch_size`` pairs per forward pass, so padding stays small. Keyed elements keep
their ids::

    scores = pairs | RunInference(CrossEncoderModelHandler(CrossEncoderSettings("ce_dir")))
    keyed = keyed_pairs | RunInference(KeyedModelHandler(CrossEncoderModelHandler(settings)))
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from apache_beam.ml.inference.base import PredictionResult
from sbert_pipeline.stage_api.model_handler_base import SettingsModelHandler
from sbert_pipeline.verify.model_check import require_one_score

from sbert_core import CrossEncoder

logger = logging.getLogger(__name__)

Pair = tuple[str, str]


@dataclass(frozen=True)
class CrossEncoderSettings:
    """How a worker loads and runs the cross-encoder (plain values: they pickle with the
    pipeline). ``None``: as the model or :meth:`CrossEncoder.load` does by default."""

    model: str
    device: str | None = None
    dtype: str = "float32"
    backend: str = "torch"
    allow_pickle: bool = False
    max_length: int | None = None
    num_threads: int | None = None
    batch_size: int = 32

    def load(self) -> CrossEncoder:
        """The cross-encoder, loaded and checked.

        Raises:
            ModelLoadError, ValueError: as :meth:`CrossEncoder.load`.
        """
        return CrossEncoder.load(
            self.model,
            device=self.device,
            dtype=self.dtype,
            backend=self.backend,
            allow_pickle=self.allow_pickle,
            max_length=self.max_length,
            num_threads=self.num_threads,
        )


class CrossEncoderModelHandler(SettingsModelHandler[Pair, CrossEncoder]):
    """Runs ``CrossEncoder.predict`` on batches of ``(text_a, text_b)`` pairs.

    Each ``PredictionResult`` holds the pair and its score (a float). A batch that fails fails
    the job: every pair of a band must be scored, so there are no dead letters here.

    Args:
        settings: how to load the cross-encoder on the worker.
        min_batch_size, max_batch_size: bounds for Beam's adaptive ``BatchElements``.
        share_across_processes: one model per machine instead of per process (default: on
            CUDA devices).
    """

    metrics_namespace = "sbert_verify"

    def __init__(
        self,
        settings: CrossEncoderSettings,
        *,
        min_batch_size: int = 256,
        max_batch_size: int = 4096,
        share_across_processes: bool | None = None,
    ) -> None:
        super().__init__(
            settings,
            min_batch_size=min_batch_size,
            max_batch_size=max_batch_size,
            share_across_processes=share_across_processes,
        )

    def load_model(self) -> CrossEncoder:
        """Load the cross-encoder on the worker (called once per process or machine)."""
        model = super().load_model()
        require_one_score(self._settings.model, model.num_labels)
        logger.info("loaded the cross-encoder %s on %s", model.model_id, model.device)
        return model

    def run_inference(
        self,
        batch: Sequence[Pair],
        model: CrossEncoder,
        inference_args: dict | None = None,
    ) -> Iterable[PredictionResult]:
        """Score a batch; one ``PredictionResult`` per pair, in order."""
        scores = model.predict(list(batch), batch_size=self._settings.batch_size)
        return [
            PredictionResult(pair, float(score)) for pair, score in zip(batch, scores, strict=True)
        ]

    def example_bytes(self, example: Pair) -> int:
        """Text bytes of one pair."""
        return len(example[0]) + len(example[1])
