"""Training a :class:`CrossEncoder` on pairs with targets in [0, 1]: binary cross-entropy on
its one logit, as sentence-transformers' CrossEncoder training does (``BCEWithLogitsLoss``).

    model = start_cross_encoder("all-MiniLM-L6-v2")       # cross_encoder_start.py
    pairs = load_cross_encoder_pairs(DataSpec(...))        # cross_encoder_data.py
    result = fit_cross_encoder(model, pairs, TrainingConfig(batch_size=32, max_steps=1000))

It runs on the step loop the bi-encoder's trainer runs on
(:class:`~sbert_core.training.step_loop.StepLoop`): the data order
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
import os
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from sbert_core.inference.cross_encoder import CrossEncoder
from sbert_core.inference.tokenizing import pad_token_ids
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import ExampleSet
from sbert_core.training.distributed import Processes, training_device
from sbert_core.training.step_loop import (
    StepLoop,
    TrainingProgress,
    TrainingResult,
    check_evaluator,
)

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
    check_evaluator(evaluator)
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    return _CrossEncoderRun(model, examples, targets, config, evaluator).fit(callbacks)


class _CrossEncoderRun(StepLoop):
    """The state of one call to :func:`fit_cross_encoder`: one process, the model itself."""

    # This module's logger: the cross-encoder finetune shows its step lines.
    logger = logger

    def __init__(
        self,
        model: CrossEncoder,
        examples: ExampleSet,
        targets: np.ndarray,
        config: TrainingConfig,
        evaluator: Evaluator | None,
    ) -> None:
        self.model = model
        device = training_device(config)
        model.to(device)
        alone = Processes(rank=0, world_size=1, owns_group=False)
        super().__init__(model, model, examples, config, evaluator, device, alone)
        self.loss_fn = nn.BCEWithLogitsLoss()
        start = time.perf_counter()
        self.features, _ = model.tokenize(list(zip(*examples.texts, strict=True)))
        logger.info("tokenised %d pairs in %.1f s", len(examples), time.perf_counter() - start)
        self.targets = torch.from_numpy(targets)
        self.left = getattr(model.tokenizer, "padding_side", "right") == "left"
        self.pad_id = int(model.tokenizer.pad_token_id)
        self.pad_type = int(getattr(model.tokenizer, "pad_token_type_id", 0) or 0)

    def fit(self, callbacks: Sequence[Callable[[TrainingProgress], None]]) -> TrainingResult:
        """Train to the last step; the run's summary."""
        logger.info(
            "training a cross-encoder on %d pairs: %d steps (%d per epoch, warm-up %d), batch "
            "%d, %s%s",
            len(self.examples),
            self.total_steps,
            self.plan.steps_per_epoch,
            self.warmup,
            self.config.batch_size,
            self.result.precision,
            f", resumed at step {self.step}" if self.result.resumed_from is not None else "",
        )
        return self._run_steps(callbacks)

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
        self._set_learning_rate()
        total = 0.0
        for indices in self.plan.micro_batches(batch, rank=0):
            share = len(indices) / len(batch)
            with self._autocast():
                logits = self.model(**self._batch(indices)).squeeze(-1)  # (B,)
            # The loss in float32 whatever the autocast: BCE of bf16 logits loses the small
            # differences near 0 and 1 that the last steps are about.
            value = self.loss_fn(logits.float(), self.targets[indices].to(self.device))
            self._backward(value * share)
            total += float(value.detach()) * share
        self._apply_update(total)
        return total
