"""Pooling token embeddings into one sentence vector, with sentence-transformers' semantics.

Modes: ``cls``, ``max``, ``mean`` (the paper's three), ``mean_sqrt_len_tokens``, ``weightedmean``
(position-weighted mean, SGPT) and ``lasttoken`` (decoder embedders such as Qwen3-Embedding).
Several modes are concatenated in the order given. ``include_prompt=False`` leaves the prompt's
tokens out of the pooled positions (INSTRUCTOR-style models).

Padding may sit on either side (decoders pad on the left); every mode finds the real tokens from
the attention mask exactly as sentence-transformers does, including its corner cases (an
all-padding row pools to zeros for mean, to ``-inf`` for max).

The config reader accepts both sentence-transformers spellings: the old
``pooling_mode_*_tokens`` booleans and the newer ``pooling_mode`` string or list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import torch

from sbert_core.model.json_files import read_json_object

PoolingMode = Literal["cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"]
POOLING_MODES: tuple[str, ...] = get_args(PoolingMode)

# Old-style boolean keys, in the order sentence-transformers concatenates the modes they switch on.
_LEGACY_KEYS = {
    "cls": "pooling_mode_cls_token",
    "max": "pooling_mode_max_tokens",
    "mean": "pooling_mode_mean_tokens",
    "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
    "weightedmean": "pooling_mode_weightedmean_tokens",
    "lasttoken": "pooling_mode_lasttoken",
}


def check_pooling_mode(mode: str) -> PoolingMode:
    """Return ``mode`` if it is a supported pooling mode, else raise ``ValueError`` listing them."""
    if mode not in POOLING_MODES:
        raise ValueError(
            f"unknown pooling mode {mode!r}; valid modes are: {', '.join(POOLING_MODES)}"
        )
    return mode  # type: ignore[return-value]


def exclude_prompt(attention_mask: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """A copy of ``attention_mask`` (B, T) with the first ``prompt_length`` real tokens zeroed.

    The prompt's tokens follow any left padding. As in sentence-transformers, the rows of a batch
    without left padding all lose their first ``prompt_length`` positions (special tokens such as
    ``[CLS]`` included, since ``prompt_length`` counts them).
    """
    mask = attention_mask.clone()
    pad_lengths = mask.to(torch.int32).argmax(dim=1)  # (B,) left padding per row
    if int(pad_lengths.sum()) == 0:
        mask[:, :prompt_length] = 0
    else:
        positions = torch.arange(mask.size(1), device=mask.device).unsqueeze(0)  # (1, T)
        mask[positions < (pad_lengths + prompt_length).unsqueeze(1)] = 0
    return mask


def pool(
    token_embeddings: torch.Tensor,
    attention_mask: torch.Tensor,
    mode: PoolingMode | tuple[PoolingMode, ...],
    *,
    prompt_length: int = 0,
) -> torch.Tensor:
    """Pool token embeddings into sentence embeddings, ignoring padding.

    Args:
        token_embeddings: ``(B, T, d)`` last hidden states.
        attention_mask: ``(B, T)`` with 1 for real tokens and 0 for padding (either side).
        mode: one mode, or several whose results are concatenated in this order.
        prompt_length: leading real tokens to leave out (the prompt, for ``include_prompt``
            False); 0 pools every real token.

    Returns:
        ``(B, d * number of modes)`` sentence embeddings in the dtype of ``token_embeddings``.
    """
    modes = (mode,) if isinstance(mode, str) else tuple(mode)
    original_mask = attention_mask
    if prompt_length:
        attention_mask = exclude_prompt(attention_mask, prompt_length)
    return torch.cat(
        [_pool_one(token_embeddings, attention_mask, original_mask, m) for m in modes], dim=-1
    )


def _pool_one(
    tokens: torch.Tensor, mask: torch.Tensor, original_mask: torch.Tensor, mode: str
) -> torch.Tensor:
    _, length, width = tokens.shape  # (B, T, d)
    if mode == "cls":
        # The first pooled position: after left padding and any excluded prompt.
        first = mask.to(torch.int).argmax(dim=1)  # (B,)
        return tokens.gather(1, first.view(-1, 1, 1).expand(-1, 1, width)).squeeze(1)
    if mode == "max":
        return tokens.masked_fill(mask.unsqueeze(-1) == 0, float("-inf")).max(dim=1).values
    if mode in ("mean", "mean_sqrt_len_tokens"):
        weights = mask.unsqueeze(-1).to(tokens.dtype)  # (B, T, 1)
        summed = (tokens * weights).sum(dim=1)  # (B, d)
        # The clamp keeps an all-padding row finite, as sentence-transformers does.
        counts = weights.sum(dim=1).clamp(min=1e-9)  # (B, 1)
        return summed / (counts if mode == "mean" else counts.sqrt())
    if mode == "weightedmean":
        # Position weights 1, 2, ... count from the first real token (after left padding), and
        # an excluded prompt keeps the weights of the tokens after it unchanged.
        positions = torch.arange(1, length + 1, device=tokens.device, dtype=tokens.dtype)
        pad_lengths = original_mask.to(torch.int32).argmax(dim=1).to(tokens.dtype)  # (B,)
        weights = mask.unsqueeze(-1).to(tokens.dtype) * (
            positions.view(1, -1, 1) - pad_lengths.view(-1, 1, 1)
        )  # (B, T, 1)
        return (tokens * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
    if mode == "lasttoken":
        # Index of the last real token; a row with none takes the last position (zeroed below).
        found, from_end = mask.flip(1).max(dim=1)  # (B,), (B,)
        from_end = torch.where(found == 0, length - 1, from_end)
        last = (length - from_end - 1).view(-1, 1, 1).expand(-1, 1, width)
        masked = tokens * mask.unsqueeze(-1).to(tokens.dtype)
        return masked.gather(1, last).squeeze(1)
    raise ValueError(check_pooling_mode(mode))


@dataclass(frozen=True)
class PoolingConfig:
    """What a sentence-transformers ``N_Pooling/config.json`` says.

    Attributes:
        dim: width of the token embeddings pooled (the transformer's hidden size).
        mode: one pooling mode, or a tuple of several (concatenated in that order).
        include_prompt: False leaves the prompt's tokens out of pooling.
    """

    dim: int
    mode: PoolingMode | tuple[PoolingMode, ...] = "mean"
    include_prompt: bool = True

    def __post_init__(self) -> None:
        modes = (self.mode,) if isinstance(self.mode, str) else tuple(self.mode)
        if not modes:
            raise ValueError("a pooling config needs at least one mode")
        for mode in modes:
            check_pooling_mode(mode)
        object.__setattr__(self, "mode", modes[0] if len(modes) == 1 else modes)

    @property
    def modes(self) -> tuple[PoolingMode, ...]:
        """The modes, always as a tuple."""
        return (self.mode,) if isinstance(self.mode, str) else self.mode  # type: ignore[return-value]

    @property
    def output_dim(self) -> int:
        """Width of the pooled vector: ``dim`` per mode."""
        return self.dim * len(self.modes)

    @property
    def label(self) -> str:
        """The mode(s) as one string for manifests: ``mean``, or ``cls+mean`` for several."""
        return "+".join(self.modes)

    @classmethod
    def from_dict(cls, config: dict, source: str = "pooling config") -> PoolingConfig:
        """Read either config spelling as sentence-transformers does.

        A ``pooling_mode`` string or list wins over the old booleans; with only booleans, every
        mode switched on is used, concatenated in sentence-transformers' fixed order, and none
        switched on means ``mean``.

        Raises:
            ValueError: no integer dimension, an unknown mode, or a non-boolean include_prompt.
        """
        dim = config.get("embedding_dimension", config.get("word_embedding_dimension"))
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise ValueError(f"{source}: no positive integer 'word_embedding_dimension'")
        include_prompt = config.get("include_prompt", True)
        if not isinstance(include_prompt, bool):
            raise ValueError(
                f"{source}: include_prompt must be true or false, got {include_prompt!r}"
            )
        raw = config.get("pooling_mode")
        if raw is not None:
            values = [raw] if isinstance(raw, str) else raw
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ValueError(f"{source}: pooling_mode must be a string or a list of strings")
            modes = tuple(_parse_mode_string(value, source) for value in values)
        else:
            modes = tuple(mode for mode, key in _LEGACY_KEYS.items() if config.get(key)) or (
                "mean",
            )
        if not modes:
            raise ValueError(f"{source}: pooling_mode is an empty list")
        return cls(dim=dim, mode=modes, include_prompt=include_prompt)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: Path) -> PoolingConfig:
        """Read ``config.json`` of a pooling module folder.

        Raises:
            ModelLoadError: the file is unreadable or not a JSON object.
            ValueError: the config names no valid pooling.
        """
        config = read_json_object(path)
        return cls.from_dict(config, source=str(path))

    def to_dict(self) -> dict:
        """The config as written to ``N_Pooling/config.json``.

        The old boolean spelling, which every sentence-transformers version reads, whenever it
        can say the modes (their order is fixed); a ``pooling_mode`` list otherwise.
        """
        config: dict = {"word_embedding_dimension": self.dim}
        canonical = tuple(mode for mode in _LEGACY_KEYS if mode in self.modes)
        if canonical == self.modes:
            for mode, key in _LEGACY_KEYS.items():
                config[key] = mode in self.modes
        else:
            config["pooling_mode"] = list(self.modes)
        config["include_prompt"] = self.include_prompt
        return config


def _parse_mode_string(value: str, source: str) -> PoolingMode:
    # Accept "mean_tokens"-style spellings of the old boolean keys as well as the bare names.
    normalised = value.lower()
    if normalised not in POOLING_MODES:
        normalised = normalised.removesuffix("_tokens").removesuffix("_token")
    if normalised not in POOLING_MODES:
        raise ValueError(
            f"{source}: unknown pooling mode {value!r}; valid modes are: {', '.join(POOLING_MODES)}"
        )
    return normalised  # type: ignore[return-value]
