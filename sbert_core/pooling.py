"""Pooling token embeddings into one sentence vector (the paper's MEAN, MAX and CLS strategies).

The config reader accepts both sentence-transformers spellings: the old
``pooling_mode_{cls,max,mean}_tokens`` booleans and the newer ``pooling_mode`` string.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import torch

PoolingMode = Literal["mean", "max", "cls"]
POOLING_MODES: tuple[str, ...] = get_args(PoolingMode)

# Old-style boolean keys, in the order sentence-transformers wrote them.
_LEGACY_KEYS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
}
_UNSUPPORTED_LEGACY_KEYS = (
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def check_pooling_mode(mode: str) -> PoolingMode:
    """Return ``mode`` if it is a supported pooling mode, else raise ``ValueError`` listing them."""
    if mode not in POOLING_MODES:
        raise ValueError(
            f"unknown pooling mode {mode!r}; valid modes are: {', '.join(POOLING_MODES)}"
        )
    return mode  # type: ignore[return-value]


def pool(
    token_embeddings: torch.Tensor, attention_mask: torch.Tensor, mode: PoolingMode
) -> torch.Tensor:
    """Pool token embeddings into sentence embeddings, ignoring padding.

    Args:
        token_embeddings: ``(B, T, d)`` last hidden states.
        attention_mask: ``(B, T)`` with 1 for real tokens and 0 for padding.
        mode: ``"mean"``, ``"max"`` or ``"cls"``.

    Returns:
        ``(B, d)`` sentence embeddings in the dtype of ``token_embeddings``.
    """
    if mode == "cls":
        return token_embeddings[:, 0]
    mask = attention_mask.unsqueeze(-1).to(token_embeddings.dtype)  # (B, T, 1)
    if mode == "mean":
        summed = (token_embeddings * mask).sum(dim=1)  # (B, d)
        # The clamp keeps an all-padding row finite, as sentence-transformers does.
        counts = mask.sum(dim=1).clamp(min=1e-9)  # (B, 1)
        return summed / counts
    if mode == "max":
        masked = token_embeddings.masked_fill(mask == 0, -1e9)
        return masked.max(dim=1).values
    raise ValueError(check_pooling_mode(mode))


@dataclass(frozen=True)
class PoolingConfig:
    """What a sentence-transformers ``N_Pooling/config.json`` says, restricted to what we run."""

    dim: int
    mode: PoolingMode = "mean"

    @classmethod
    def from_dict(cls, config: dict, source: str = "pooling config") -> PoolingConfig:
        """Read either config spelling; refuse modes we do not implement instead of guessing."""
        dim = config.get("embedding_dimension", config.get("word_embedding_dimension"))
        if not isinstance(dim, int):
            raise ValueError(f"{source}: no integer 'word_embedding_dimension'")
        if "pooling_mode" in config and isinstance(config["pooling_mode"], str):
            return cls(dim=dim, mode=_parse_mode_string(config["pooling_mode"], source))
        for key in _UNSUPPORTED_LEGACY_KEYS:
            if config.get(key):
                raise ValueError(
                    f"{source}: {key} is not supported; valid modes are: {', '.join(POOLING_MODES)}"
                )
        chosen = [mode for mode, key in _LEGACY_KEYS.items() if config.get(key)]
        if len(chosen) != 1:
            raise ValueError(
                f"{source}: expected exactly one of {', '.join(_LEGACY_KEYS.values())} to be true, "
                f"got {chosen or 'none'}"
            )
        return cls(dim=dim, mode=chosen[0])  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: Path) -> PoolingConfig:
        """Read ``config.json`` of a pooling module folder."""
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: unreadable pooling config ({err})") from err
        return cls.from_dict(config, source=str(path))

    def to_dict(self) -> dict:
        """The old boolean spelling, which every sentence-transformers version reads."""
        config: dict = {"word_embedding_dimension": self.dim}
        for mode, key in _LEGACY_KEYS.items():
            config[key] = mode == self.mode
        config["pooling_mode_mean_sqrt_len_tokens"] = False
        return config


def _parse_mode_string(value: str, source: str) -> PoolingMode:
    # sentence-transformers accepts "mean_tokens"-style aliases as well as the bare names.
    normalised = value.lower().removesuffix("_tokens").removesuffix("_token")
    if normalised not in POOLING_MODES:
        raise ValueError(
            f"{source}: unknown pooling mode {value!r}; valid modes are: {', '.join(POOLING_MODES)}"
        )
    return normalised  # type: ignore[return-value]
