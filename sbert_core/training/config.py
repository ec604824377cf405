"""What a fine-tuning run is told: :class:`TrainingConfig`, the paper's recipe by default.

The hyper-parameters are Reimers & Gurevych (2019), section 4: batch 16, AdamW with learning rate
2e-5, linear warm-up over 10% of the steps then linear decay, one epoch, MEAN pooling. Load one
from YAML with :func:`sbert_core.config.load_config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, get_args

from sbert_core.config import Aliases
from sbert_core.model.pooling import PoolingMode

# The autocast dtype, spelled as the encoder's dtypes and the manifests spell it; "auto" is
# bfloat16 where the device computes it natively, else float32 (step_loop.resolve_precision).
TrainingPrecision = Literal["float32", "bfloat16", "float16", "auto"]
# Spellings configs used before the names were unified; still read, stored as the names above.
PRECISION_ALIASES = {"bf16": "bfloat16", "fp16": "float16"}
# How examples are cut into batches (sbert_core.training.batches.BatchPlan): "shuffle" is a
# plain shuffle; "no_duplicates" never puts two examples of one group in a batch
# (sbert_core.training.group_batches), with the data's group ids or, without them, groups of
# examples sharing a text; "auto" is no_duplicates when the examples carry group ids, else shuffle.
BatchSampler = Literal["auto", "shuffle", "no_duplicates"]


@dataclass
class TrainingConfig:
    """How to train. Hyper-parameters default to the paper's recipe (to sentence-transformers'
    choices where the paper is silent)."""

    # Examples per optimizer step, over all processes and accumulation micro-batches, so that a
    # config trains the same way on 1 or N processes.
    batch_size: int = 16
    learning_rate: float = 2e-5
    # sentence-transformers' fit() value; biases and LayerNorm weights are never decayed.
    weight_decay: float = 0.01
    # Linear warm-up over this fraction of all steps, then linear decay to zero.
    warmup_ratio: float = 0.1
    epochs: int = 1
    # Stop after this many optimizer steps (the schedule is laid out over them); None: all epochs.
    max_steps: int | None = None
    # auto: no_duplicates when the training data has duplicate groups (kind duplicate_pairs),
    # so in-batch negatives never include a duplicate of the anchor; else shuffle.
    batch_sampler: BatchSampler = "auto"
    # Micro-batches per step, to bound memory; in-batch negatives then see only their part.
    gradient_accumulation_steps: int = 1
    # Clip the gradient norm (sentence-transformers' default); None: no clipping.
    max_grad_norm: float | None = 1.0
    # The paper pools by MEAN; None keeps the base model's own pooling.
    pooling: PoolingMode | None = "mean"
    # Truncate inputs to this many tokens; None: the base model's limit.
    max_seq_length: int | None = None
    # A prompt prepended to every training text: one of the base model's prompts by name, or a
    # text. The trained model records it as its default prompt, so it embeds as it was trained.
    # None for both: no prompt (sentence-transformers' trainer applies none by default either).
    prompt_name: str | None = None
    prompt: str | None = None
    seed: int = 42
    # Autocast for the forward pass (weights and optimizer stay float32): bfloat16 on GPUs or on
    # CPUs with AVX512-BF16/AMX; float16 on GPUs only, with loss scaling; auto: bfloat16 where
    # the device has it natively (a CPU with AVX512-BF16/AMX, a GPU with bf16), else float32.
    precision: Annotated[TrainingPrecision, Aliases(PRECISION_ALIASES)] = "float32"
    # None: CUDA when available (cuda:LOCAL_RANK under torchrun), else CPU.
    device: str | None = None
    num_threads: int | None = None
    # Pad all columns of a batch to one width and embed them in one forward pass: faster for
    # sentence pairs; switch off for short queries against long documents.
    merge_columns: bool = True
    # Evaluate on the dev set every N steps, and after each epoch; 0: after each epoch only.
    evaluate_every: int = 0
    # With a dev set: end with the weights that scored best on it rather than the last ones.
    keep_best: bool = True
    # Where checkpoints go; None: no checkpoints (the finetune job puts them next to its output).
    checkpoint_dir: str | None = None
    # Write a checkpoint every N steps; 0: never.
    checkpoint_every: int = 500
    # How many step checkpoints to keep (the newest ones).
    keep_checkpoints: int = 1
    # Continue from the newest checkpoint in checkpoint_dir when there is one.
    resume: bool = True
    log_every: int = 50

    def __post_init__(self) -> None:
        # Configs built in Python may use the old spellings too.
        self.precision = PRECISION_ALIASES.get(self.precision, self.precision)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first invalid field."""
        positive = {
            "batch_size": self.batch_size,
            "epochs": self.epochs,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "keep_checkpoints": self.keep_checkpoints,
            "log_every": self.log_every,
        }
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        for name in ("max_steps", "max_seq_length", "num_threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or null, got {value}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(f"max_grad_norm must be > 0 or null, got {self.max_grad_norm}")
        if self.batch_sampler not in get_args(BatchSampler):
            raise ValueError(
                f"batch_sampler must be one of {', '.join(get_args(BatchSampler))}, "
                f"got {self.batch_sampler!r}"
            )
        if self.prompt_name is not None and self.prompt is not None:
            raise ValueError("give either prompt_name or prompt, not both")
        if self.evaluate_every < 0 or self.checkpoint_every < 0:
            raise ValueError("evaluate_every and checkpoint_every must be >= 0")
