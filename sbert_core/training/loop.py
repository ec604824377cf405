"""Fine-tuning a :class:`SentenceEncoder`: the paper's recipe, resumable and data-parallel.

    config = load_config(TrainingConfig, "train.yaml", ["epochs=4"])
    encoder = load_base_encoder("all-MiniLM-L6-v2", config)
    loss = CosineSimilarityLoss(encoder)
    result = train(loss, load_examples(DataSpec(path="stsb/train.tsv.gz")), config)

The defaults are Reimers & Gurevych (2019), section 4: batch 16, AdamW with learning rate 2e-5,
linear warm-up over 10% of the steps then linear decay, one epoch, MEAN pooling. This module is
the loop; each piece it drives has its own:

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
import math
import os
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, get_args

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from sbert_core.config import config_to_dict
from sbert_core.inference.encoder import SentenceEncoder
from sbert_core.training.batches import BatchFeatures, BatchPlan, training_prompt
from sbert_core.training.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    random_state,
    restore_random_state,
    seed_everything,
    write_checkpoint,
)
from sbert_core.training.config import TrainingConfig, TrainingPrecision
from sbert_core.training.data import ExampleSet
from sbert_core.training.distributed import (
    Processes,
    data_parallel,
    finish_together,
    join_processes,
    leave_processes,
    training_device,
)
from sbert_core.training.optimizer import adamw, linear_schedule, warmup_steps

if TYPE_CHECKING:
    from sbert_core.evaluation.evaluators import Evaluator

logger = logging.getLogger(__name__)


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or infinite; training stopped before applying that step."""


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


@dataclass(frozen=True)
class TrainingProgress:
    """What callbacks see after each optimizer step."""

    step: int
    total_steps: int
    epoch: int
    loss: float
    learning_rate: float


@dataclass
class TrainingResult:
    """What a finished run reports.

    Attributes:
        steps: optimizer steps done, including those before a resume.
        total_steps: steps the schedule was laid out over.
        seconds: wall time of this call (not of earlier, interrupted calls).
        examples_per_second: training examples processed per second in this call.
        loss_history: ``(step, mean loss over the last log_every steps)``.
        dev_history: dev metrics with their ``step``.
        best_step, best_score: the dev evaluation whose weights were kept (None without dev).
        primary_metric: the dev metric that picks the best weights.
        resumed_from: the step of the checkpoint this run continued from, or None.
        world_size: processes that trained together.
    """

    steps: int = 0
    total_steps: int = 0
    seconds: float = 0.0
    examples_per_second: float = 0.0
    loss_history: list[tuple[int, float]] = field(default_factory=list)
    dev_history: list[dict] = field(default_factory=list)
    best_step: int | None = None
    best_score: float | None = None
    primary_metric: str | None = None
    resumed_from: int | None = None
    world_size: int = 1

    @property
    def final_loss(self) -> float | None:
        """Mean loss of the last logging window."""
        return self.loss_history[-1][1] if self.loss_history else None


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
    if evaluator is not None and not getattr(evaluator, "primary_metric", None):
        raise ValueError("the evaluator needs a primary_metric attribute naming its main metric")
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


class _TrainingRun:
    """The state of one call to :func:`train`."""

    def __init__(
        self,
        loss: nn.Module,
        examples: ExampleSet,
        config: TrainingConfig,
        evaluator: Evaluator | None,
        device: torch.device,
        processes: Processes,
    ) -> None:
        self.config = config
        self.loss = loss
        self.encoder: SentenceEncoder = loss.model
        self.examples = examples
        self.evaluator = evaluator
        self.device = device
        self.processes = processes
        self.plan = BatchPlan.for_training(examples, config, self.processes.world_size)
        per_run = self.plan.steps_per_epoch * config.epochs
        self.total_steps = min(per_run, config.max_steps) if config.max_steps else per_run
        self.warmup = warmup_steps(self.total_steps, config.warmup_ratio)
        self.autocast_dtype = autocast_dtype_for(config.precision, self.device)

        loss.to(self.device)
        # BERT-style poolers are computed but never used by sentence embeddings: their weights
        # get no gradient, which DDP would treat as an error.
        for name, parameter in self.encoder.transformer.named_parameters():
            if name.startswith("pooler."):
                parameter.requires_grad_(False)
        self.optimizer = adamw(loss, config, self.device)
        self.scaler = (
            torch.amp.GradScaler(self.device.type) if config.precision == "float16" else None
        )
        prompt = training_prompt(self.encoder, config)
        self.batches = BatchFeatures(
            self.encoder, examples, config.merge_columns, self.device, prompt=prompt
        )

        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.result = TrainingResult(
            total_steps=self.total_steps,
            primary_metric=getattr(evaluator, "primary_metric", None),
            world_size=self.processes.world_size,
        )
        self.best_weights: dict[str, torch.Tensor] | None = None
        self._window: list[float] = []
        self._last_checkpoint: Path | None = None

        seed_everything(config.seed + self.processes.rank)
        checkpoint = latest_checkpoint(config.checkpoint_dir) if config.resume else None
        if checkpoint is not None:
            self._restore(checkpoint)
        self.model = data_parallel(loss, self.device, self.processes)

    # ------------------------------------------------------------------ training

    def fit(self, callbacks: Sequence[Callable[[TrainingProgress], None]]) -> TrainingResult:
        config = self.config
        logger.info(
            "training on %d examples: %d steps (%d per epoch, warm-up %d), batch %d over %d "
            "process(es)%s",
            len(self.examples),
            self.total_steps,
            self.plan.steps_per_epoch,
            self.warmup,
            config.batch_size,
            self.processes.world_size,
            f", resumed at step {self.step}" if self.result.resumed_from is not None else "",
        )
        start = time.perf_counter()
        examples_seen = 0
        self.loss.train()
        while self.step < self.total_steps:
            batches = self.plan.batches(self.epoch)
            while self.batch_in_epoch < len(batches) and self.step < self.total_steps:
                batch = batches[self.batch_in_epoch]
                value = self._optimizer_step(batch)
                self.batch_in_epoch += 1
                self.step += 1
                examples_seen += len(batch)
                end_of_epoch = self.batch_in_epoch == len(batches)
                self._after_step(value, end_of_epoch, callbacks)
            if self.batch_in_epoch == len(batches):
                self.epoch += 1
                self.batch_in_epoch = 0

        if self.best_weights is not None and config.keep_best:
            self.loss.load_state_dict(self.best_weights)
        self.loss.eval()
        self.result.steps = self.step
        self.result.seconds = time.perf_counter() - start
        self.result.examples_per_second = examples_seen / max(self.result.seconds, 1e-9)
        return self.result

    def _optimizer_step(self, batch: np.ndarray) -> float:
        """One update from one global batch; returns the batch's mean loss over all processes."""
        learning_rate = self.config.learning_rate * linear_schedule(
            self.step, self.total_steps, self.warmup
        )
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        parts = self.plan.micro_batches(batch, self.processes.rank)
        total = torch.zeros((), device=self.device)
        for position, indices in enumerate(parts):
            share = len(indices) / len(batch)
            # Accumulate locally; DDP averages gradients over processes once, on the last part.
            syncing = position == len(parts) - 1 or self.processes.world_size == 1
            context = nullcontext() if syncing else self.model.no_sync()
            with context:
                with torch.autocast(
                    self.device.type,
                    dtype=self.autocast_dtype or torch.float32,
                    enabled=self.autocast_dtype is not None,
                ):
                    value = self.model(
                        self.batches.features(indices), self.batches.targets(indices)
                    )
                # Scaled so that after DDP divides by world_size, the gradient is the mean over
                # the whole global batch.
                weighted = value.float() * share * self.processes.world_size
                (self.scaler.scale(weighted) if self.scaler else weighted).backward()
            total += value.detach().float() * share
        if self.processes.world_size > 1:
            dist.all_reduce(total)
        mean_loss = float(total)
        if not math.isfinite(mean_loss):
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainingDivergedError(self._divergence_message(mean_loss))
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self._trainable(), self.config.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return mean_loss

    def _trainable(self) -> list[nn.Parameter]:
        return [p for p in self.loss.parameters() if p.requires_grad]

    def _divergence_message(self, value: float) -> str:
        where = (
            f"the last good checkpoint is {self._last_checkpoint}"
            if self._last_checkpoint is not None
            else "no checkpoint was written before it"
        )
        return (
            f"the loss became {value} at step {self.step + 1} of {self.total_steps} "
            f"(epoch {self.epoch + 1}); training stopped before applying that step, and {where}. "
            "Lower learning_rate, or use precision float32 if mixed precision is on."
        )

    def _after_step(
        self,
        value: float,
        end_of_epoch: bool,
        callbacks: Sequence[Callable[[TrainingProgress], None]],
    ) -> None:
        config = self.config
        self._window.append(value)
        last = self.step == self.total_steps
        if self.step % config.log_every == 0 or last:
            mean = sum(self._window) / len(self._window)
            self.result.loss_history.append((self.step, mean))
            self._window = []
            logger.info(
                "step %d/%d (epoch %d) loss %.5f lr %.3g",
                self.step,
                self.total_steps,
                self.epoch + 1,
                mean,
                self.optimizer.param_groups[0]["lr"],
            )
        if self.evaluator is not None and (
            end_of_epoch
            or last
            or (config.evaluate_every and self.step % config.evaluate_every == 0)
        ):
            self._evaluate()
        if (
            config.checkpoint_dir is not None
            and config.checkpoint_every
            and self.step % config.checkpoint_every == 0
            and not last
        ):
            self._checkpoint()
        progress = TrainingProgress(
            self.step,
            self.total_steps,
            self.epoch,
            value,
            self.optimizer.param_groups[0]["lr"],
        )
        for callback in callbacks:
            callback(progress)

    # ------------------------------------------------------------------ evaluation

    def _evaluate(self) -> None:
        """Score the dev set on the main process; every process learns the result."""
        metrics = None
        if self.processes.is_main:
            self.loss.eval()
            try:
                metrics = {"step": self.step, **self.evaluator(self.encoder)}
            finally:
                self.loss.train()
        if self.processes.world_size > 1:
            shared = [metrics]
            dist.broadcast_object_list(shared, src=0)
            metrics = shared[0]
        self.result.dev_history.append(metrics)
        score = metrics[self.result.primary_metric]
        logger.info("dev %s at step %d: %.4f", self.result.primary_metric, self.step, score)
        if self.result.best_score is None or score > self.result.best_score:
            self.result.best_score = score
            self.result.best_step = self.step
            self.best_weights = {k: v.detach().clone() for k, v in self.loss.state_dict().items()}

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint(self) -> None:
        random_states = [random_state()]
        if self.processes.world_size > 1:
            random_states = [None] * self.processes.world_size
            dist.all_gather_object(random_states, random_state())
        if not self.processes.is_main:
            return
        self._last_checkpoint = write_checkpoint(
            self.config.checkpoint_dir,
            self.step,
            weights=self.loss.state_dict(),
            best_weights=self.best_weights,
            optimizer_state=self.optimizer.state_dict(),
            random_states=random_states,
            state={
                "step": self.step,
                "epoch": self.epoch,
                "batch_in_epoch": self.batch_in_epoch,
                "total_steps": self.total_steps,
                "world_size": self.processes.world_size,
                "data_fingerprint": self.examples.fingerprint(),
                "config": config_to_dict(self.config),
                "scaler": self.scaler.state_dict() if self.scaler else None,
                "result": {
                    "loss_history": self.result.loss_history,
                    "dev_history": self.result.dev_history,
                    "best_step": self.result.best_step,
                    "best_score": self.result.best_score,
                    "window": self._window,
                },
            },
            keep=self.config.keep_checkpoints,
        )

    def _restore(self, path: Path) -> None:
        checkpoint = Checkpoint.open(path)
        state = checkpoint.state
        changed = checkpoint.check_resumable(
            self.examples.fingerprint(), config_to_dict(self.config)
        )
        if changed:
            logger.warning("resuming from %s with changed settings: %s", path, ", ".join(changed))
        self.loss.load_state_dict(checkpoint.weights(self.device))
        self.optimizer.load_state_dict(checkpoint.optimizer_state())
        if self.scaler is not None and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        if state["world_size"] == self.processes.world_size:
            restore_random_state(checkpoint.random_state(self.processes.rank))
        else:
            logger.warning(
                "%s was written by %d process(es), this run has %d: dropout masks will differ "
                "from an uninterrupted run",
                path,
                state["world_size"],
                self.processes.world_size,
            )
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
        saved_result = state["result"]
        self.result.loss_history = [tuple(entry) for entry in saved_result["loss_history"]]
        self.result.dev_history = saved_result["dev_history"]
        self.result.best_step = saved_result["best_step"]
        self.result.best_score = saved_result["best_score"]
        self.result.resumed_from = self.step
        self._window = saved_result["window"]
        self._last_checkpoint = path
        best = checkpoint.best_weights(self.device)
        if best is not None:
            self.best_weights = best
        logger.info("resumed from %s (step %d)", path, self.step)


def autocast_dtype_for(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``; None: no autocast (float32)."""
    if precision == "float32":
        return None
    if precision == "float16":
        if device.type != "cuda":
            raise ValueError(
                "precision float16 needs a CUDA device; on CPU use bfloat16 or float32"
            )
        return torch.float16
    if precision == "bfloat16":
        return torch.bfloat16
    valid = ", ".join(get_args(TrainingPrecision))
    raise ValueError(f"unknown precision {precision!r}; valid: {valid}")
