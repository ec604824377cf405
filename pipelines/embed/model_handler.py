"""Beam ``ModelHandler`` around the SBERT core encoder.

Loading and batching are the stages' shared handler base's: the encoder is loaded in
``load_model`` on the worker, never pickled with the pipeline. Batches from ``BatchElements``
are large; inside each, the encoder sorts by token length and forms token-budget sub-batches,
so padding stays small (smart batching at pipeline level).

Like Beam's own handlers it takes plain texts, so it drops into any pipeline::

    vectors = texts | RunInference(SbertModelHandler("all-MiniLM-L6-v2"))
    keyed = pairs | RunInference(KeyedModelHandler(SbertModelHandler("all-MiniLM-L6-v2")))
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import PredictionResult
from sbert_pipeline.io.corpus_reader import CorpusRecord
from sbert_pipeline.io.counters import METRICS_NAMESPACE
from sbert_pipeline.stage_api.model_handler_base import SettingsModelHandler
from sbert_pipeline.vectors.checks import non_finite_rows
from sbert_pipeline.vectors.progress import (
    EMBED_PROGRESS,
    count_forward_rows,
    settle_rows,
    shared_progress,
)

from sbert_core import SentenceEncoder
from sbert_core.inference.encode_result import EncodeResult
from sbert_core.inference.encoder_settings import EncoderSettings

logger = logging.getLogger(__name__)

NON_FINITE_REASON = "non-finite embedding"
# Counter of embedded rows whose vector is all zeros (recorded in the embed manifest).
ZERO_VECTORS = "zero_vectors"
# Before any row has embedded in a worker: this many rows in a row failing alone with their
# batch's exception mean the failure is not the rows' (one row could be bad by chance; several
# different texts failing identically while nothing ever worked are not). Fewer rows than this
# all failing are dead letters, and the job's all-rejected check fails the run.
DETERMINISTIC_ROWS = 4
# After rows have embedded: this many rows in a row failing alone with one exception (a device
# lost mid-run). Row-specific failures are rarely consecutive once records are shuffled.
CONSECUTIVE_FAILURES = 256


class DeterministicInferenceError(RuntimeError):
    """Inference fails the same way whatever the text: the job stops, nothing is published."""


def _signature(err: BaseException) -> tuple[str, str]:
    return type(err).__name__, str(err)


@dataclass(frozen=True)
class Embedding:
    """The inference part of a ``PredictionResult``: one vector and its token accounting."""

    vector: np.ndarray  # (d,) float32
    n_tokens: int
    truncated: bool


@dataclass(frozen=True)
class InferenceFailure:
    """The inference part of a ``PredictionResult`` for a text the encoder failed on."""

    reason: str


# What the handler embeds: a text, a ``(key, text)`` pair, or a corpus record (the embed job's).
Example = str | tuple[Any, str] | CorpusRecord


def example_text(example: Example) -> str:
    """The text of one example.

    Raises:
        TypeError: ``example`` is none of a str, a ``(key, text)`` tuple or a ``CorpusRecord``.
    """
    if isinstance(example, str):
        return example
    if isinstance(example, CorpusRecord):
        return example.text
    if isinstance(example, tuple) and len(example) == 2 and isinstance(example[1], str):
        return example[1]
    raise TypeError(
        "SbertModelHandler embeds str, (key, text) tuples or CorpusRecord, not "
        f"{type(example).__name__}: {str(example)[:80]!r}"
    )


# Marks an encoder whose forward passes already count rows on the progress bar.
_ROWS_COUNTED = "_sbert_rows_counted"


class SbertModelHandler(SettingsModelHandler[Example, SentenceEncoder]):
    """Runs ``SentenceEncoder.encode_detailed`` on batches of texts.

    Each ``PredictionResult`` holds the example as given (a str, a ``(key, text)`` tuple or a
    corpus record) and an ``Embedding`` (``vector``, ``n_tokens``, ``truncated``), or an
    ``InferenceFailure`` with the reason for a text the encoder failed on alone.

    Args:
        settings: how to load the encoder on the worker; a str is a model (a directory,
            the bundled ``all-MiniLM-L6-v2`` or a Hub id) with default settings.
        min_batch_size, max_batch_size: bounds for Beam's adaptive ``BatchElements``.
        share_across_processes: one model per machine instead of per process (GPU workers).
    """

    metrics_namespace = "sbert"

    def __init__(
        self,
        settings: EncoderSettings | str,
        *,
        min_batch_size: int = 4096,
        max_batch_size: int = 8192,
        share_across_processes: bool | None = None,
    ) -> None:
        if isinstance(settings, str):
            settings = EncoderSettings(model=settings)
        super().__init__(
            settings,
            min_batch_size=min_batch_size,
            max_batch_size=max_batch_size,
            share_across_processes=share_across_processes,
        )
        self._embedded = 0
        self._started = 0.0
        self._last_log = 0.0
        # Per worker: whether any row ever embedded, and the current run of rows failing alone
        # with one exception (type, message); see run_inference.
        self._succeeded = False
        self._failure_signature: tuple[str, str] | None = None
        self._failure_run = 0
        self._zero_vectors = Metrics.counter(METRICS_NAMESPACE, ZERO_VECTORS)

    def load_model(self) -> SentenceEncoder:
        """The encoder on the worker (loaded once per process or machine, then kept)."""
        encoder = super().load_model()
        shared_progress(EMBED_PROGRESS, "texts").start()  # the rate counts from the first batch
        if not getattr(encoder, _ROWS_COUNTED, False):  # a kept encoder has its counter
            logger.info(
                "loaded %s on %s (%s)",
                encoder.model_id,
                encoder.device,
                encoder.describe()["dtype"],
            )
            count_forward_rows(encoder, EMBED_PROGRESS, "texts")  # the bar moves inside a batch
            setattr(encoder, _ROWS_COUNTED, True)
        return encoder

    def run_inference(
        self,
        batch: Sequence[Example],
        model: SentenceEncoder,
        inference_args: dict | None = None,
    ) -> Iterable[PredictionResult]:
        """Encode a batch; one ``PredictionResult`` per example, in order.

        If the batch fails, each record is retried alone, so one bad text cannot take its
        neighbours down; a record that fails alone gets an ``InferenceFailure`` (dead letter), as
        does a record whose embedding holds NaN or infinite values.

        Raises:
            DeterministicInferenceError: the failure is not about the rows: the first
                ``DETERMINISTIC_ROWS`` rows retried alone failed with the same exception as
                their batch before any row ever succeeded in this worker, or
                ``CONSECUTIVE_FAILURES`` rows in a row did (a model that cannot run on its
                device, a bad token budget, ...). The job stops instead of rejecting every row.
        """
        texts = [example_text(example) for example in batch]  # a wrong type fails the batch
        try:
            result = model.encode_detailed(texts, **self._settings.encode_kwargs())
        except Exception as err:  # any failure of the model code is retried row by row
            return self._one_by_one(batch, model, err)
        return self._results(batch, result)

    def _one_by_one(
        self, batch: Sequence[Example], model: SentenceEncoder, batch_error: Exception
    ) -> list[PredictionResult]:
        if len(batch) > 1:
            logger.warning(
                "a batch of %d failed (%s); retrying one by one", len(batch), batch_error
            )
        signature = _signature(batch_error)
        outputs: list[PredictionResult] = []
        for position, record in enumerate(batch):
            try:
                if position == 0 and len(batch) == 1:
                    raise batch_error  # a batch of one has been tried alone already
                result = model.encode_detailed(
                    [example_text(record)], **self._settings.encode_kwargs()
                )
            except Exception as err:  # a row that fails alone becomes a dead letter
                self._note_failure(_signature(err), signature)
                reason = f"inference failed: {type(err).__name__}: {str(err)[:300]}"
                outputs.append(PredictionResult(record, InferenceFailure(reason)))
                continue
            outputs.extend(self._results([record], result))
        return outputs

    def _note_failure(self, signature: tuple[str, str], batch_signature: tuple[str, str]) -> None:
        """Count rows failing alone with one exception; raise once it cannot be the rows' fault."""
        if signature != self._failure_signature:
            self._failure_signature, self._failure_run = signature, 0
        self._failure_run += 1
        limit = CONSECUTIVE_FAILURES if self._succeeded else DETERMINISTIC_ROWS
        if signature == batch_signature and self._failure_run >= limit:
            raise DeterministicInferenceError(
                f"inference fails the same way whatever the text ({self._failure_run} different "
                "texts in a row, each tried alone), so the model or its settings are at fault, "
                f"not the rows: {signature[0]}: {signature[1][:500]}"
            )

    def _results(self, batch: Sequence[Example], result: EncodeResult) -> list:
        """Embeddings for the finite rows, dead letters for rows with NaN or infinite values."""
        self._succeeded = True
        self._failure_signature, self._failure_run = None, 0
        bad = non_finite_rows(result.embeddings)
        zero = ~bad & ~result.embeddings.any(axis=1)
        self._zero_vectors.inc(int(zero.sum()))  # also at 0, so the manifest says 0, not null
        self._log_progress(len(batch))
        return [
            PredictionResult(
                record,
                InferenceFailure(NON_FINITE_REASON)
                if bad[i]
                else Embedding(
                    result.embeddings[i], int(result.n_tokens[i]), bool(result.truncated[i])
                ),
            )
            for i, record in enumerate(batch)
        ]

    def example_bytes(self, example: Example) -> int:
        """Text bytes of one example."""
        return len(example_text(example))

    def _log_progress(self, n: int) -> None:
        bar = shared_progress(EMBED_PROGRESS, "texts")
        if bar.enabled:  # the launcher's process draws a bar; the log line is for other workers
            settle_rows(EMBED_PROGRESS, "texts", n)
            return
        now = time.monotonic()
        if not self._started:
            self._started = self._last_log = now
        self._embedded += n
        if now - self._last_log >= 10:
            self._last_log = now
            rate = self._embedded / max(now - self._started, 1e-9)
            logger.info("embedded %d texts in this worker (%.0f/s)", self._embedded, rate)
