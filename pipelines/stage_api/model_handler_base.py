"""The shared part of the stages' Beam ``ModelHandler``s (embed's encoder, verify's cross-encoder).

Beam's own handlers (``apache_beam.ml.inference``) keep loading and batching in the handler and
leave ``run_inference`` to each model kind; :class:`SettingsModelHandler` does the same for the
stages' models. The model is described by plain, picklable settings and loaded in
``load_model`` on the worker (once per process, kept across partitions and stages; once per
machine on GPU workers, where ``share_model_across_processes`` is on), never pickled with the
pipeline. ``BatchElements`` hands it large batches, which the model re-batches by token length
inside.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, Generic, Protocol, TypeVar

from apache_beam.ml.inference.base import ModelHandler, PredictionResult
from sbert_pipeline.stage_api.model_cache import cached_model

ExampleT = TypeVar("ExampleT")
ModelT = TypeVar("ModelT")
ModelT_co = TypeVar("ModelT_co", covariant=True)


class ModelSettings(Protocol, Generic[ModelT_co]):
    """Plain values that say how a worker loads its model."""

    @property
    def model(self) -> str:
        """The model: a directory, a bundled name or a Hub id."""
        ...

    @property
    def device(self) -> str | None:
        """Where the model runs (``"cuda:0"``, ``"cpu"``...), None for the default."""
        ...

    def load(self) -> ModelT_co:
        """The model, loaded and checked."""
        ...


class SettingsModelHandler(ModelHandler[ExampleT, PredictionResult, ModelT], ABC):
    """A ``ModelHandler`` that loads its model from settings and batches by Beam's bounds.

    Subclasses give ``run_inference``, :meth:`example_bytes` and :attr:`metrics_namespace`,
    and extend :meth:`load_model` for what they check or start once the model is loaded.

    Args:
        settings: how to load the model on the worker.
        min_batch_size, max_batch_size: bounds for Beam's adaptive ``BatchElements``.
        share_across_processes: one model per machine instead of per process (default: on
            CUDA devices).
    """

    metrics_namespace: ClassVar[str]  # namespace of RunInference's own metrics

    def __init__(
        self,
        settings: ModelSettings[ModelT],
        *,
        min_batch_size: int,
        max_batch_size: int,
        share_across_processes: bool | None = None,
    ) -> None:
        super().__init__()
        self._settings = settings
        self._batching = {"min_batch_size": min_batch_size, "max_batch_size": max_batch_size}
        device = settings.device or ""
        self._share = (
            device.startswith("cuda") if share_across_processes is None else share_across_processes
        )

    def load_model(self) -> ModelT:
        """The model on the worker: loaded once per process (or machine) and kept for the next
        bundle, partition or stage that asks for the same (:mod:`model_cache`)."""
        return cached_model(self._settings, self._settings.model, self._settings.load)

    @abstractmethod
    def example_bytes(self, example: ExampleT) -> int:
        """Text bytes of one example (what :meth:`get_num_bytes` adds up)."""

    def get_num_bytes(self, batch: Sequence[ExampleT]) -> int:
        """Text bytes in a batch (Beam's default pickles the batch just to measure it)."""
        return sum(self.example_bytes(example) for example in batch)

    def get_metrics_namespace(self) -> str:
        """Namespace of RunInference's own metrics."""
        return self.metrics_namespace

    def batch_elements_kwargs(self) -> dict:
        """Large batches: the model re-batches them by token length inside."""
        return dict(self._batching)

    def share_model_across_processes(self) -> bool:
        """One model per machine on GPU workers, one per process elsewhere."""
        return self._share
