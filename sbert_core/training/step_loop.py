"""The optimizer-step loop both trainers share: the bi-encoder's (:mod:`.loop`) and the
cross-encoder's (:mod:`.cross_encoder_fit`).

:class:`StepLoop` holds what does not depend on the model: the data order over epochs
(:class:`~sbert_core.training.batches.BatchPlan`), the learning-rate schedule, the optimizer
and float16 gradient scaler, the step bookkeeping, the loss window with its progress/ETA log,
the divergence check, dev evaluation with ``keep_best``, and the checkpoints a killed run
resumes from. A trainer subclasses it and supplies only :meth:`StepLoop._optimizer_step` (how a
batch becomes a loss and gradients), plus its model and processes.

Checkpoint state keys are those :mod:`sbert_core.training.checkpoint` documents; checkpoints
written before this module existed resume unchanged.
"""

from __future__ import annotations

import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from sbert_core.config import config_to_dict
from sbert_core.training.batches import BatchPlan
from sbert_core.training.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    non_finite_tensor,
    random_state,
    restore_random_state,
    seed_everything,
    verify_checkpoint,
    write_checkpoint,
)
from sbert_core.training.config import TrainingConfig, TrainingPrecision
from sbert_core.training.data import ExampleSet
from sbert_core.training.distributed import Processes
from sbert_core.training.optimizer import adamw, linear_schedule, warmup_steps


class TrainingDivergedError(RuntimeError):
    """The loss or the weights became NaN or infinite; training stopped before applying that
    step (the loss) or writing its checkpoint (the weights)."""


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
        precision: the autocast dtype that ran (``auto`` resolved).
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
    precision: str = "float32"

    @property
    def final_loss(self) -> float | None:
        """Mean loss of the last logging window."""
        return self.loss_history[-1][1] if self.loss_history else None


def check_evaluator(evaluator: object | None) -> None:
    """Refuse an evaluator without the ``primary_metric`` that picks the best weights."""
    if evaluator is not None and not getattr(evaluator, "primary_metric", None):
        raise ValueError("the evaluator needs a primary_metric attribute naming its main metric")


def resolve_precision(precision: str, device: torch.device) -> str:
    """``precision`` with ``auto`` resolved: bfloat16 where ``device`` computes it natively (a
    CPU with AVX512-BF16 or AMX-BF16, read at run time; a CUDA device with bf16), else float32
    (a CPU without them emulates bf16, several times slower than float32)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    if device.type == "cpu":
        from sbert_core.inference.cpu_features import detect_cpu_features

        return "bfloat16" if detect_cpu_features().fast_bf16 else "float32"
    return "float32"


def autocast_dtype_for(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device`` (``auto`` resolved by
    :func:`resolve_precision`); None: no autocast (float32)."""
    precision = resolve_precision(precision, device)
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


def duration(seconds: float) -> str:
    """``1h02m``, ``12m05s`` or ``42s``."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class StepLoop(ABC):
    """One training call's state and its loop over optimizer steps.

    Subclasses set :attr:`logger` (their module's, so that each trainer's progress lines keep
    the logger name the stages turn on) and implement :meth:`_optimizer_step`; they call
    ``super().__init__`` once the module is on its device and its frozen parameters are marked,
    since the optimizer is built here.

    Attributes:
        module: what is trained, checkpointed and restored (its ``state_dict`` is the weights).
        evaluated: what the evaluator is called on (the encoder inside a loss, or the model).
    """

    logger: logging.Logger

    def __init__(
        self,
        module: nn.Module,
        evaluated: Any,
        examples: ExampleSet,
        config: TrainingConfig,
        evaluator: Callable[[Any], dict] | None,
        device: torch.device,
        processes: Processes,
    ) -> None:
        self.module = module
        self.evaluated = evaluated
        self.examples = examples
        self.config = config
        self.evaluator = evaluator
        self.device = device
        self.processes = processes
        self.plan = BatchPlan.for_training(examples, config, processes.world_size)
        per_run = self.plan.steps_per_epoch * config.epochs
        self.total_steps = min(per_run, config.max_steps) if config.max_steps else per_run
        self.warmup = warmup_steps(self.total_steps, config.warmup_ratio)
        self.autocast_dtype = autocast_dtype_for(config.precision, device)
        self.optimizer = adamw(module, config, device)
        self.scaler = torch.amp.GradScaler(device.type) if config.precision == "float16" else None

        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.result = TrainingResult(
            total_steps=self.total_steps,
            primary_metric=getattr(evaluator, "primary_metric", None),
            world_size=processes.world_size,
            precision=resolve_precision(config.precision, device),
        )
        self.best_weights: dict[str, torch.Tensor] | None = None
        self._window: list[float] = []
        # The checkpoints this run wrote or resumed from, oldest first (older ones may be gone).
        self._checkpoints: list[Path] = []
        # When and at which step this call started training, for the s/step and ETA of the log.
        self._started = time.perf_counter()
        self._first_step = 0

        seed_everything(config.seed + processes.rank)
        checkpoint = latest_checkpoint(config.checkpoint_dir) if config.resume else None
        if checkpoint is not None:
            self._restore(checkpoint)

    # ------------------------------------------------------------------ training

    @abstractmethod
    def _optimizer_step(self, batch: np.ndarray) -> float:
        """One update from one global batch; returns the batch's mean loss.

        Implementations set the learning rate (:meth:`_set_learning_rate`), accumulate
        gradients over :meth:`BatchPlan.micro_batches` under :meth:`_autocast`, and finish with
        :meth:`_apply_update`.
        """

    def _run_steps(self, callbacks: Sequence[Callable[[TrainingProgress], None]]) -> TrainingResult:
        """Train from the current step to the last one; the run's summary."""
        start = time.perf_counter()
        self._started, self._first_step = start, self.step
        examples_seen = 0
        self.module.train()
        while self.step < self.total_steps:
            batches = self.plan.batches(self.epoch)
            while self.batch_in_epoch < len(batches) and self.step < self.total_steps:
                batch = batches[self.batch_in_epoch]
                value = self._optimizer_step(batch)
                self.batch_in_epoch += 1
                self.step += 1
                examples_seen += len(batch)
                self._after_step(value, self.batch_in_epoch == len(batches), callbacks)
            if self.batch_in_epoch == len(batches):
                self.epoch += 1
                self.batch_in_epoch = 0

        if self.best_weights is not None and self.config.keep_best:
            self.module.load_state_dict(self.best_weights)
        self.module.eval()
        self.result.steps = self.step
        self.result.seconds = time.perf_counter() - start
        self.result.examples_per_second = examples_seen / max(self.result.seconds, 1e-9)
        return self.result

    def _set_learning_rate(self) -> None:
        """The schedule's learning rate for this step, on every parameter group."""
        learning_rate = self.config.learning_rate * linear_schedule(
            self.step, self.total_steps, self.warmup
        )
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

    def _autocast(self) -> AbstractContextManager:
        """The forward pass's autocast (a no-op in float32)."""
        return torch.autocast(
            self.device.type,
            dtype=self.autocast_dtype or torch.float32,
            enabled=self.autocast_dtype is not None,
        )

    def _backward(self, weighted: torch.Tensor) -> None:
        """Backward through the float16 scaler when there is one."""
        (self.scaler.scale(weighted) if self.scaler else weighted).backward()

    def _apply_update(self, mean_loss: float) -> None:
        """Check the loss, then clip and apply the accumulated gradients.

        Raises:
            TrainingDivergedError: the loss is NaN/inf; the gradients are dropped unapplied.
        """
        if not math.isfinite(mean_loss):
            self.optimizer.zero_grad(set_to_none=True)
            raise TrainingDivergedError(
                self._divergence_message(
                    f"the loss became {mean_loss}", self.step + 1, "before applying that step"
                )
            )
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.config.max_grad_norm is not None:
            trainable = [p for p in self.module.parameters() if p.requires_grad]
            torch.nn.utils.clip_grad_norm_(trainable, self.config.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _divergence_message(self, what: str, step: int, stopped: str) -> str:
        """Why training stopped, and the last good checkpoint to go back to."""
        good = self._last_good_checkpoint()
        where = (
            f"the last good checkpoint is {good}"
            if good is not None
            else "no good checkpoint was written before it"
        )
        return (
            f"{what} at step {step} of {self.total_steps} (epoch {self.epoch + 1}); training "
            f"stopped {stopped}, and {where}. "
            "Lower learning_rate, or use precision float32 if mixed precision is on."
        )

    def _last_good_checkpoint(self) -> Path | None:
        """This run's newest checkpoint that is still on disk and verifies: one damaged since
        it was written is never named as good."""
        for path in reversed(self._checkpoints):
            try:
                verify_checkpoint(path)
            except ValueError:
                continue
            return path
        return None

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
            elapsed = time.perf_counter() - self._started
            per_step = elapsed / max(1, self.step - self._first_step)
            self.logger.info(
                "step %d/%d (epoch %d) loss %.5f lr %.3g, %.2f s/step, ETA %s",
                self.step,
                self.total_steps,
                self.epoch + 1,
                mean,
                self.optimizer.param_groups[0]["lr"],
                per_step,
                duration(per_step * (self.total_steps - self.step)),
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
            self.step, self.total_steps, self.epoch, value, self.optimizer.param_groups[0]["lr"]
        )
        for callback in callbacks:
            callback(progress)

    # ------------------------------------------------------------------ evaluation

    def _evaluate(self) -> None:
        """Score the dev set on the main process; every process learns the result."""
        metrics = None
        if self.processes.is_main:
            self.module.eval()
            try:
                metrics = {"step": self.step, **self.evaluator(self.evaluated)}
            finally:
                # Evaluators may leave the model in eval mode (predict() does).
                self.module.train()
        if self.processes.world_size > 1:
            shared = [metrics]
            dist.broadcast_object_list(shared, src=0)
            metrics = shared[0]
        self.result.dev_history.append(metrics)
        score = metrics[self.result.primary_metric]
        self.logger.info("dev %s at step %d: %.4f", self.result.primary_metric, self.step, score)
        if self.result.best_score is None or score > self.result.best_score:
            self.result.best_score = score
            self.result.best_step = self.step
            self.best_weights = {k: v.detach().clone() for k, v in self.module.state_dict().items()}

    # ------------------------------------------------------------------ checkpoints

    def _checkpoint(self) -> None:
        weights = self.module.state_dict()
        # Every process holds the same weights, so all stop here together. A NaN checkpoint
        # would replace the good ones that keep_checkpoints lets go.
        broken = non_finite_tensor(weights)
        if broken is not None:
            raise TrainingDivergedError(
                self._divergence_message(
                    f"the weights ({broken}) became NaN or infinite",
                    self.step,
                    "without writing that step's checkpoint",
                )
            )
        random_states = [random_state()]
        if self.processes.world_size > 1:
            random_states = [None] * self.processes.world_size
            dist.all_gather_object(random_states, random_state())
        if not self.processes.is_main:
            return
        written = write_checkpoint(
            self.config.checkpoint_dir,
            self.step,
            weights=weights,
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
        self._checkpoints.append(written)

    def _restore(self, path: Path) -> None:
        checkpoint = Checkpoint.open(path)
        state = checkpoint.state
        changed = checkpoint.check_resumable(
            self.examples.fingerprint(), config_to_dict(self.config)
        )
        if changed:
            self.logger.warning(
                "resuming from %s with changed settings: %s", path, ", ".join(changed)
            )
        self.module.load_state_dict(checkpoint.weights(self.device))
        self.optimizer.load_state_dict(checkpoint.optimizer_state())
        if self.scaler is not None and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        if state["world_size"] == self.processes.world_size:
            restore_random_state(checkpoint.random_state(self.processes.rank))
        else:
            self.logger.warning(
                "%s was written by %d process(es), this run has %d: dropout masks will differ "
                "from an uninterrupted run",
                path,
                state["world_size"],
                self.processes.world_size,
            )
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
        saved = state["result"]
        self.result.loss_history = [tuple(entry) for entry in saved["loss_history"]]
        self.result.dev_history = saved["dev_history"]
        self.result.best_step = saved["best_step"]
        self.result.best_score = saved["best_score"]
        self.result.resumed_from = self.step
        self._window = saved["window"]
        self._checkpoints.append(path)
        best = checkpoint.best_weights(self.device)
        if best is not None:
            self.best_weights = best
        self.logger.info("resumed from %s (step %d)", path, self.step)
