"""Training a :class:`CrossEncoder` on pairs with targets in [0, 1]: binary cross-entropy on
its one logit, as sentence-transformers' CrossEncoder training does (``BCEWithLogitsLoss``).

    model = start_cross_encoder("all-MiniLM-L6-v2")       # cross_encoder_start.py
    pairs = load_cross_encoder_pairs(DataSpec(...))        # cross_encoder_data.py
    result = fit_cross_encoder(model, pairs, TrainingConfig(batch_size=32, max_steps=1000))

It reuses the bi-encoder loop's pieces (:mod:`sbert_core.training.loop`): the data order
(:class:`~sbert_core.training.batches.BatchPlan`: a seeded shuffle per epoch, accumulation
micro-batches), AdamW with linear warm-up and decay, the seeding, bf16 autocast, gradient
clipping, the divergence check, dev evaluation with ``keep_best``, and checkpoints in
safetensors that a killed run resumes from (same data and batch size: the same weights as an
uninterrupted run). Pairs are tokenised once, up front, as :meth:`CrossEncoder.tokenize` does
for ``predict``, and padded per batch. One process (torchrun's data parallelism is the
bi-encoder's only).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sbert_core.config import config_to_dict
from sbert_core.inference.cross_encoder import CrossEncoder
from sbert_core.inference.tokenizing import pad_token_ids
from sbert_core.training.batches import BatchPlan
from sbert_core.training.checkpoint import (
    Checkpoint,
    latest_checkpoint,
    random_state,
    restore_random_state,
    seed_everything,
    write_checkpoint,
)
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import ExampleSet
from sbert_core.training.distributed import training_device
from sbert_core.training.loop import (
    TrainingDivergedError,
    TrainingProgress,
    TrainingResult,
    autocast_dtype_for,
)
from sbert_core.training.optimizer import adamw, linear_schedule, warmup_steps

logger = logging.getLogger(__name__)

# A dev evaluator: the model -> metrics, with a ``primary_metric`` attribute naming the one that
# picks the best weights (cross_encoder_eval.PairScoreEvaluator).
Evaluator = Callable[[CrossEncoder], dict]


def fit_cross_encoder(
    model: CrossEncoder,
    examples: ExampleSet,
    config: TrainingConfig,
    *,
    evaluator: Evaluator | None = None,
    callbacks: Sequence[Callable[[TrainingProgress], None]] = (),
) -> TrainingResult:
    """Train ``model`` on ``examples`` (two text columns, float targets in [0, 1]).

    Args:
        model: a one-label cross-encoder (its activation is what ``predict`` applies; training
            puts the loss on the logits).
        examples: from :func:`~sbert_core.training.cross_encoder_data.load_cross_encoder_pairs`.
        config: batch size, learning rate, warm-up, epochs/max_steps, precision, seed,
            evaluation and checkpoints, as for the bi-encoder.
        evaluator: dev metrics, run every ``evaluate_every`` steps and after each epoch.
        callbacks: called after each optimizer step.

    Returns:
        The run's summary; ``model`` holds the final (or best, with ``keep_best``) weights and
        is left in eval mode.

    Raises:
        TrainingDivergedError: the loss became NaN/inf; the last checkpoint is kept.
        ValueError: an invalid config, a model with several labels, examples without targets or
            targets outside [0, 1], more than one process, a checkpoint of another run.
    """
    config.validate()
    if model.num_labels != 1:
        raise ValueError(
            f"binary cross-entropy trains a one-label cross-encoder; {model.model_id} has "
            f"{model.num_labels} labels"
        )
    if examples.targets is None or len(examples.texts) != 2:
        raise ValueError(f"{examples.source}: a cross-encoder trains on pairs with targets")
    targets = np.asarray(examples.targets, dtype=np.float32)
    if not np.all((targets >= 0) & (targets <= 1)):
        bad = int(np.flatnonzero(~((targets >= 0) & (targets <= 1)))[0])
        raise ValueError(
            f"{examples.source}: example {bad + 1} has the target {targets[bad]:g}; binary "
            "cross-entropy needs targets in [0, 1]"
        )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError("cross-encoder training runs in one process; start it without torchrun")
    if evaluator is not None and not getattr(evaluator, "primary_metric", None):
        raise ValueError("the evaluator needs a primary_metric attribute naming its main metric")
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    return _CrossEncoderRun(model, examples, targets, config, evaluator).fit(callbacks)


class _CrossEncoderRun:
    """The state of one call to :func:`fit_cross_encoder`."""

    def __init__(
        self,
        model: CrossEncoder,
        examples: ExampleSet,
        targets: np.ndarray,
        config: TrainingConfig,
        evaluator: Evaluator | None,
    ) -> None:
        self.model = model
        self.examples = examples
        self.config = config
        self.evaluator = evaluator
        self.device = training_device(config)
        model.to(self.device)
        self.plan = BatchPlan.for_training(examples, config, world_size=1)
        per_run = self.plan.steps_per_epoch * config.epochs
        self.total_steps = min(per_run, config.max_steps) if config.max_steps else per_run
        self.warmup = warmup_steps(self.total_steps, config.warmup_ratio)
        self.autocast_dtype = autocast_dtype_for(config.precision, self.device)
        self.optimizer = adamw(model, config, self.device)
        self.scaler = (
            torch.amp.GradScaler(self.device.type) if config.precision == "float16" else None
        )
        self.loss_fn = nn.BCEWithLogitsLoss()
        start = time.perf_counter()
        self.features, _ = model.tokenize(list(zip(*examples.texts, strict=True)))
        logger.info("tokenised %d pairs in %.1f s", len(examples), time.perf_counter() - start)
        self.targets = torch.from_numpy(targets)
        self.left = getattr(model.tokenizer, "padding_side", "right") == "left"
        self.pad_id = int(model.tokenizer.pad_token_id)
        self.pad_type = int(getattr(model.tokenizer, "pad_token_type_id", 0) or 0)

        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.result = TrainingResult(
            total_steps=self.total_steps,
            primary_metric=getattr(evaluator, "primary_metric", None),
        )
        self.best_weights: dict[str, torch.Tensor] | None = None
        self._window: list[float] = []
        self._last_checkpoint: Path | None = None
        # When and at which step this call started training, for the s/step and ETA of the log.
        self._started = time.perf_counter()
        self._first_step = 0
        seed_everything(config.seed)
        checkpoint = latest_checkpoint(config.checkpoint_dir) if config.resume else None
        if checkpoint is not None:
            self._restore(checkpoint)

    def fit(self, callbacks: Sequence[Callable[[TrainingProgress], None]]) -> TrainingResult:
        logger.info(
            "training a cross-encoder on %d pairs: %d steps (%d per epoch, warm-up %d), batch %d%s",
            len(self.examples),
            self.total_steps,
            self.plan.steps_per_epoch,
            self.warmup,
            self.config.batch_size,
            f", resumed at step {self.step}" if self.result.resumed_from is not None else "",
        )
        start = time.perf_counter()
        self._started, self._first_step = start, self.step
        seen = 0
        self.model.train()
        while self.step < self.total_steps:
            batches = self.plan.batches(self.epoch)
            while self.batch_in_epoch < len(batches) and self.step < self.total_steps:
                batch = batches[self.batch_in_epoch]
                value = self._optimizer_step(batch)
                self.batch_in_epoch += 1
                self.step += 1
                seen += len(batch)
                self._after_step(value, self.batch_in_epoch == len(batches), callbacks)
            if self.batch_in_epoch == len(batches):
                self.epoch += 1
                self.batch_in_epoch = 0
        if self.best_weights is not None and self.config.keep_best:
            self.model.load_state_dict(self.best_weights)
        self.model.eval()
        self.result.steps = self.step
        self.result.seconds = time.perf_counter() - start
        self.result.examples_per_second = seen / max(self.result.seconds, 1e-9)
        return self.result

    def _batch(self, indices: np.ndarray) -> dict[str, torch.Tensor]:
        """The padded tensors of the pairs at ``indices``, as ``predict`` builds them."""
        batch = pad_token_ids(
            [self.features["input_ids"][i] for i in indices],
            self.pad_id,
            left=self.left,
            device=self.device,
        )
        if "token_type_ids" in self.features:
            types = [self.features["token_type_ids"][i] for i in indices]
            batch["token_type_ids"] = pad_token_ids(
                types, self.pad_type, left=self.left, device=self.device
            )["input_ids"]
        return batch

    def _optimizer_step(self, batch: np.ndarray) -> float:
        """One update from one batch; returns the batch's mean loss."""
        learning_rate = self.config.learning_rate * linear_schedule(
            self.step, self.total_steps, self.warmup
        )
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate
        total = 0.0
        for indices in self.plan.micro_batches(batch, rank=0):
            share = len(indices) / len(batch)
            with torch.autocast(
                self.device.type,
                dtype=self.autocast_dtype or torch.float32,
                enabled=self.autocast_dtype is not None,
            ):
                logits = self.model(**self._batch(indices)).squeeze(-1)  # (B,)
            # The loss in float32 whatever the autocast: BCE of bf16 logits loses the small
            # differences near 0 and 1 that the last steps are about.
            value = self.loss_fn(logits.float(), self.targets[indices].to(self.device))
            weighted = value * share
            (self.scaler.scale(weighted) if self.scaler else weighted).backward()
            total += float(value.detach()) * share
        if not math.isfinite(total):
            self.optimizer.zero_grad(set_to_none=True)
            where = (
                f"the last good checkpoint is {self._last_checkpoint}"
                if self._last_checkpoint is not None
                else "no checkpoint was written before it"
            )
            raise TrainingDivergedError(
                f"the loss became {total} at step {self.step + 1} of {self.total_steps} "
                f"(epoch {self.epoch + 1}); training stopped before applying that step, and "
                f"{where}. Lower learning_rate, or use precision float32."
            )
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.config.max_grad_norm is not None:
            trainable = [p for p in self.model.parameters() if p.requires_grad]
            torch.nn.utils.clip_grad_norm_(trainable, self.config.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total

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
            logger.info(
                "step %d/%d (epoch %d) loss %.5f lr %.3g, %.2f s/step, ETA %s",
                self.step,
                self.total_steps,
                self.epoch + 1,
                mean,
                self.optimizer.param_groups[0]["lr"],
                per_step,
                _duration(per_step * (self.total_steps - self.step)),
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

    def _evaluate(self) -> None:
        try:
            metrics = {"step": self.step, **self.evaluator(self.model)}
        finally:
            self.model.train()  # predict() leaves the model in eval mode
        self.result.dev_history.append(metrics)
        score = metrics[self.result.primary_metric]
        logger.info("dev %s at step %d: %.4f", self.result.primary_metric, self.step, score)
        if self.result.best_score is None or score > self.result.best_score:
            self.result.best_score = score
            self.result.best_step = self.step
            self.best_weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def _checkpoint(self) -> None:
        self._last_checkpoint = write_checkpoint(
            self.config.checkpoint_dir,
            self.step,
            weights=self.model.state_dict(),
            best_weights=self.best_weights,
            optimizer_state=self.optimizer.state_dict(),
            random_states=[random_state()],
            state={
                "step": self.step,
                "epoch": self.epoch,
                "batch_in_epoch": self.batch_in_epoch,
                "total_steps": self.total_steps,
                "world_size": 1,
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
        self.model.load_state_dict(checkpoint.weights(self.device))
        self.optimizer.load_state_dict(checkpoint.optimizer_state())
        if self.scaler is not None and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        restore_random_state(checkpoint.random_state(0))
        self.step, self.epoch = state["step"], state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
        saved = state["result"]
        self.result.loss_history = [tuple(entry) for entry in saved["loss_history"]]
        self.result.dev_history = saved["dev_history"]
        self.result.best_step = saved["best_step"]
        self.result.best_score = saved["best_score"]
        self.result.resumed_from = self.step
        self._window = saved["window"]
        self._last_checkpoint = path
        self.best_weights = checkpoint.best_weights(self.device)
        logger.info("resumed from %s (step %d)", path, self.step)


def _duration(seconds: float) -> str:
    """``1h02m``, ``12m05s`` or ``42s``."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
