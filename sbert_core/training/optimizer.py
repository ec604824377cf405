"""The optimizer and its learning-rate schedule, as in the paper and sentence-transformers.

AdamW without weight decay on biases and norms; the learning rate rises linearly over the
warm-up steps, then falls linearly to zero at the last step.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sbert_core.training.config import TrainingConfig


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    """Warm-up length in steps (rounded up, as Hugging Face's Trainer does)."""
    return math.ceil(total_steps * warmup_ratio)


def linear_schedule(step: int, total_steps: int, warmup: int) -> float:
    """Learning-rate multiplier for optimizer step ``step`` (0-based).

    Rises linearly from 0 over ``warmup`` steps, then falls linearly to 0 at ``total_steps``:
    the schedule of the paper and of ``transformers.get_linear_schedule_with_warmup``.
    """
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup))


def adamw(loss: nn.Module, config: TrainingConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over the trainable parameters, without weight decay on biases and norms."""
    no_decay = set()
    for module in loss.modules():
        if isinstance(module, nn.LayerNorm) or "norm" in type(module).__name__.lower():
            no_decay.update(id(p) for p in module.parameters(recurse=False))
    for name, parameter in loss.named_parameters():
        if name.endswith("bias"):
            no_decay.add(id(parameter))
    trainable = [p for p in loss.parameters() if p.requires_grad]
    groups = [
        {
            "params": [p for p in trainable if id(p) not in no_decay],
            "weight_decay": config.weight_decay,
        },
        {"params": [p for p in trainable if id(p) in no_decay], "weight_decay": 0.0},
    ]
    # The fused kernel (CPU and CUDA) is the fastest and what Hugging Face's Trainer uses.
    fused = device.type in ("cpu", "cuda") and all(p.dtype == torch.float32 for p in trainable)
    return torch.optim.AdamW(groups, lr=config.learning_rate, fused=fused or None)
