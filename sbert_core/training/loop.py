"""Fine-tuning a :class:`SentenceEncoder`: the paper's recipe, resumable and data-parallel.

    config = load_config(TrainingConfig, "train.yaml", ["epochs=4"])
    encoder = load_base_encoder("all-MiniLM-L6-v2", config)
    loss = CosineSimilarityLoss(encoder)
    result = train(loss, load_examples(DataSpec(path="stsb/train.tsv.gz")), config)

The defaults are Reimers & Gurevych (2019), section 4: batch 16, AdamW with learning rate 2e-5,
linear warm-up over 10% of the steps then linear decay, one epoch, MEAN pooling. This module is
the bi-encoder's entry point; each piece it drives has its own:

- :mod:`sbert_core.training.step_loop`: the loop over optimizer steps that the cross-encoder's
  trainer shares (schedule, progress log, divergence check, dev evaluation, checkpoints); this
  module adds the loss module, the processes and the data-parallel step.
- :mod:`sbert_core.training.config`: :class:`TrainingConfig`, read from YAML/JSON and overrides
  with :func:`sbert_core.config.load_config`.
- :mod:`sbert_core.training.batches`: the data order and its sharding over processes and
  accumulation steps: 1 process, N processes (``torchrun --nproc_per_node N``; gloo on CPU,
  NCCL on GPUs) and any accumulation compute the same update up to float rounding, as long as
  dropout is off.
- :mod:`sbert_core.training.optimizer`: AdamW and the linear warm-up/decay schedule.
- :mod:`sbert_core.training.distributed`: each process's device and the process group.
- :mod:`sbert_core.training.checkpoint`: checkpoints in safetensors + JSON (no pickle); a run
  that is killed resumes from the newest one and ends with the same weights as an uninterrupted
  run.
- :mod:`sbert_core.evaluation.evaluators`: the dev-set metrics (:func:`build_evaluator`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from sbert_core.inference.encoder import SentenceEncoder
from sbert_core.training.batches import BatchFeatures, training_prompt
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import ExampleSet
from sbert_core.training.distributed import (
    Processes,
    data_parallel,
    finish_together,
    join_processes,
    leave_processes,
    training_device,
)

# The run's summary types and errors live with the shared step loop; callers import them from
# here, the bi-encoder's training entry point.
from sbert_core.training.step_loop import (
    StepLoop,
    TrainingDivergedError,
    TrainingProgress,
    TrainingResult,
    autocast_dtype_for,
    check_evaluator,
)

if TYPE_CHECKING:
    from sbert_core.evaluation.evaluators import Evaluator

logger = logging.getLogger(__name__)

__all__ = [
    "TrainingDivergedError",
    "TrainingProgress",
    "TrainingResult",
    "autocast_dtype_for",
    "load_base_encoder",
    "train",
]


def load_base_encoder(
    model: str | os.PathLike, config: TrainingConfig, *, allow_pickle: bool = False
) -> SentenceEncoder:
    """Load the model to fine-tune in float32 with the config's pooling, length and device."""
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    return SentenceEncoder.load(
        model,
        device=training_device(config),
        pooling=config.pooling,
        max_seq_length=config.max_seq_length,
        allow_pickle=allow_pickle,
    )


def train(
    loss: nn.Module,
    examples: ExampleSet,
    config: TrainingConfig,
    *,
    evaluator: Evaluator | None = None,
    callbacks: Sequence[Callable[[TrainingProgress], None]] = (),
) -> TrainingResult:
    """Train ``loss.model`` (a :class:`SentenceEncoder`) on ``examples``.

    Args:
        loss: a loss module from :mod:`sbert_core.training.losses` around the encoder.
        examples: training examples of a kind the loss accepts.
        config: hyper-parameters, evaluation, checkpointing.
        evaluator: dev-set metric (see :func:`build_evaluator`): a callable on the encoder
            returning a dict of metrics, with a ``primary_metric`` attribute; run on the main
            process every ``evaluate_every`` steps and after each epoch.
        callbacks: called on every process after each optimizer step.

    Returns:
        The run's summary; ``loss.model`` holds the final (or best, with ``keep_best``) weights
        and is left in eval mode.

    Raises:
        TrainingDivergedError: the loss became NaN/inf; the last checkpoint is kept.
        ValueError: invalid config, or a checkpoint written for another run.
    """
    config.validate()
    check_evaluator(evaluator)
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    device = training_device(config)
    processes = join_processes(device)
    try:
        result = _TrainingRun(loss, examples, config, evaluator, device, processes).fit(callbacks)
        finish_together(processes)
        return result
    finally:
        leave_processes(processes)


class _TrainingRun(StepLoop):
    """The state of one call to :func:`train`: the loss module over the processes."""

    # This module's logger: the finetune stage shows its step lines.
    logger = logger

    def __init__(
        self,
        loss: nn.Module,
        examples: ExampleSet,
        config: TrainingConfig,
        evaluator: Evaluator | None,
        device: torch.device,
        processes: Processes,
    ) -> None:
        self.loss = loss
        self.encoder: SentenceEncoder = loss.model
        loss.to(device)
        # BERT-style poolers are computed but never used by sentence embeddings: their weights
        # get no gradient, which DDP would treat as an error.
        for name, parameter in self.encoder.transformer.named_parameters():
            if name.startswith("pooler."):
                parameter.requires_grad_(False)
        super().__init__(loss, self.encoder, examples, config, evaluator, device, processes)
        prompt = training_prompt(self.encoder, config)
        self.batches = BatchFeatures(
            self.encoder, examples, config.merge_columns, self.device, prompt=prompt
        )
        self.model = data_parallel(loss, self.device, self.processes)

    def fit(self, callbacks: Sequence[Callable[[TrainingProgress], None]]) -> TrainingResult:
        """Train to the last step; the run's summary."""
        logger.info(
            "training on %d examples: %d steps (%d per epoch, warm-up %d), batch %d over %d "
            "process(es), %s%s",
            len(self.examples),
            self.total_steps,
            self.plan.steps_per_epoch,
            self.warmup,
            self.config.batch_size,
            self.processes.world_size,
            self.result.precision,
            f", resumed at step {self.step}" if self.result.resumed_from is not None else "",
        )
        return self._run_steps(callbacks)

    def _optimizer_step(self, batch: np.ndarray) -> float:
        """One update from one global batch; returns the batch's mean loss over all processes."""
        self._set_learning_rate()
        parts = self.plan.micro_batches(batch, self.processes.rank)
        total = torch.zeros((), device=self.device)
        for position, indices in enumerate(parts):
            share = len(indices) / len(batch)
            # Accumulate locally; DDP averages gradients over processes once, on the last part.
            syncing = position == len(parts) - 1 or self.processes.world_size == 1
            context = nullcontext() if syncing else self.model.no_sync()
            with context:
                with self._autocast():
                    value = self.model(
                        self.batches.features(indices), self.batches.targets(indices)
                    )
                # Scaled so that after DDP divides by world_size, the gradient is the mean over
                # the whole global batch.
                self._backward(value.float() * share * self.processes.world_size)
            total += value.detach().float() * share
        if self.processes.world_size > 1:
            dist.all_reduce(total)
        mean_loss = float(total)
        self._apply_update(mean_loss)
        return mean_loss
