"""What a model directory holds, checked and read without loading the transformer's weights.

:func:`inspect_model` resolves and checks a model (files, configs, tokenizer, weight checksum,
the modules after pooling) into a :class:`ModelInfo`; :meth:`SentenceEncoder.load
<sbert_core.inference.encoder.SentenceEncoder.load>` builds on it, loading the weights with
:func:`load_transformer`. The helpers on the module chain and the manifest description are
shared by :class:`ModelInfo` and the encoder.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from sbert_core.errors import ModelLoadError
from sbert_core.model.architectures import check_plain_folder_tokenizer, transformer_class
from sbert_core.model.artifact import (
    ModelLayout,
    read_layout,
    sha256_of_files,
    weight_files,
)
from sbert_core.model.head_modules import (
    HeadModule,
    Normalize,
    check_truncate_dim,
    head_weight_file,
    load_head_module,
    out_width,
)
from sbert_core.model.pooling import PoolingConfig, PoolingMode, check_pooling_mode
from sbert_core.model.prompts import PromptSettings, PromptTask
from sbert_core.model.source import DEFAULT_MODEL, resolve_model_dir
from sbert_core.model.weight_checks import check_loaded_model, check_weight_files


@dataclass(frozen=True)
class ModelInfo:
    """A model's files checked and its configuration read, without loading the weights."""

    model_id: str
    transformer_dir: Path
    weights_sha256: str
    uses_pickle: bool
    pooling: PoolingConfig
    normalize: bool
    max_seq_length: int
    do_lower_case: bool
    config: object  # transformers.PretrainedConfig
    tokenizer: object  # transformers.PreTrainedTokenizerBase
    heads: tuple[HeadModule, ...] = ()  # modules after pooling, weights loaded and checked
    prompts: PromptSettings = field(default_factory=PromptSettings)
    truncate_dim: int | None = None  # the load-time default of encode()

    @property
    def full_dim(self) -> int:
        """Width of the vectors the chain gives, before any truncation."""
        return chain_width(self.pooling, self.heads)

    @property
    def dim(self) -> int:
        """Width of the vectors ``encode`` gives by default (``truncate_dim`` if set)."""
        return self.truncate_dim or self.full_dim

    def describe(
        self,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        task: PromptTask | None = None,
        truncate_dim: int | None = None,
        normalize: bool | None = None,
    ) -> dict:
        """What manifests record about the model, for ``encode`` called with these arguments.

        See :meth:`SentenceEncoder.describe`.
        """
        return describe_model(
            self,
            prompt_name=prompt_name,
            prompt=prompt,
            task=task,
            truncate_dim=truncate_dim,
            normalize=normalize,
        )


def inspect_model(
    model: str | os.PathLike = DEFAULT_MODEL,
    *,
    allow_pickle: bool = False,
    pooling: PoolingMode | None = None,
    normalize: bool | None = None,
    max_seq_length: int | None = None,
    truncate_dim: int | None = None,
) -> ModelInfo:
    """Resolve, check and describe a model cheaply (configs, tokenizer, weight checksum).

    Launchers call this before a job starts so that a missing or corrupt model fails at once;
    :meth:`SentenceEncoder.load` builds on it. Arguments are as for ``SentenceEncoder.load``.

    ``config.json`` is first checked against the weights' sizes, building nothing (sizes in a
    sane range, the parameters it implies within what the weight files hold; see
    :mod:`sbert_core.model.config_bounds`). Safetensors weights are then checked against the
    architecture of ``config.json`` (every parameter present with its shape, no foreign
    tensors) and for NaN/infinite values, one memory-mapped tensor at a time. The modules after
    pooling (Dense, LayerNorm) are small and are loaded here, their weights checked the same way.

    The model's identity, ``weights_sha256``, covers the transformer's weight files and then
    those of the modules after pooling, in chain order.

    Raises:
        ModelLoadError: missing or corrupt files, unsupported modules, unreachable hub id,
            weights that do not fit the architecture or hold NaN/infinite values.
        ValueError: unknown pooling mode, a max_seq_length beyond the model's limit, or a
            truncate_dim outside ``[1, dim]``.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if pooling is not None:
        check_pooling_mode(pooling)
    directory, model_id = resolve_model_dir(model)
    layout = read_layout(directory)
    files = weight_files(layout.transformer_dir, allow_pickle=allow_pickle)
    source = layout.transformer_dir
    config, tokenizer = read_config_and_tokenizer_files(
        source, directory, plain_folder=not layout.is_sentence_transformer
    )
    if layout.padding_side is not None:
        tokenizer.padding_side = layout.padding_side
    transformer_class(config, source / "config.json")
    # Before anything is built from the config.
    uses_pickle = check_weight_files(config, files, source)

    pooling_config = _pooling_config(layout, config, pooling, directory)
    heads, width = _head_modules(layout, pooling_config.output_dim, allow_pickle)
    head_files = [f for f in (head_weight_file(entry.path) for entry in layout.heads) if f]
    heads = with_normalize(heads, normalize)
    return ModelInfo(
        model_id=model_id,
        transformer_dir=source,
        weights_sha256=sha256_of_files([*files, *head_files]),
        uses_pickle=uses_pickle,
        pooling=pooling_config,
        normalize=ends_normalized(heads),
        max_seq_length=_max_seq_length(layout, config, tokenizer, max_seq_length),
        do_lower_case=layout.do_lower_case,
        config=config,
        tokenizer=tokenizer,
        heads=tuple(heads),
        prompts=layout.prompts,
        truncate_dim=check_truncate_dim(truncate_dim, width),
    )


def _pooling_config(
    layout: ModelLayout, config, pooling: PoolingMode | None, directory: Path
) -> PoolingConfig:
    """The model's pooling (mean over the hidden size when it names none), with the mode
    ``pooling`` asks for.

    Raises:
        ModelLoadError: the pooling's dimension is not the transformer's hidden size.
    """
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    pooling_config = layout.pooling or PoolingConfig(dim=hidden, mode="mean")
    if pooling is not None:
        pooling_config = PoolingConfig(
            dim=pooling_config.dim, mode=pooling, include_prompt=pooling_config.include_prompt
        )
    if hidden and pooling_config.dim != hidden:
        raise ModelLoadError(
            f"{directory}: pooling dimension {pooling_config.dim} != hidden size {hidden}"
        )
    return pooling_config


def _head_modules(
    layout: ModelLayout, width: int, allow_pickle: bool
) -> tuple[list[HeadModule], int]:
    """The modules after pooling, loaded and checked in chain order, and the final width."""
    heads: list[HeadModule] = []
    for entry in layout.heads:
        module = load_head_module(entry.kind, entry.path, allow_pickle=allow_pickle, width=width)
        heads.append(module)
        width = out_width(module, width)
    return heads, width


def load_transformer(info: ModelInfo, dtype: torch.dtype) -> nn.Module:
    """The transformer ``info`` describes, its weights loaded in ``dtype`` and checked.

    Raises:
        ModelLoadError: weights that cannot be read or do not fit the architecture.
    """
    model_class = transformer_class(info.config, info.transformer_dir / "config.json")
    try:
        transformer, loading_info = model_class.from_pretrained(
            info.transformer_dir,
            config=info.config,
            dtype=dtype,
            use_safetensors=not info.uses_pickle,
            trust_remote_code=False,
            output_loading_info=True,
        )
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelLoadError(f"{info.transformer_dir}: could not load the weights ({err})") from err
    check_loaded_model(transformer, loading_info, info.transformer_dir)
    return transformer


def with_normalize(heads: list[HeadModule], normalize: bool | None) -> list[HeadModule]:
    """The chain with the ``normalize`` override: None as is, False without any Normalize
    module, True ending with one."""
    if normalize is False:
        return [module for module in heads if not isinstance(module, Normalize)]
    if normalize and not ends_normalized(heads):
        return [*heads, Normalize()]
    return list(heads)


def ends_normalized(heads: Sequence[nn.Module]) -> bool:
    """Whether the chain after pooling ends with a Normalize module (unit-length vectors)."""
    return bool(heads) and isinstance(heads[-1], Normalize)


def chain_width(pooling: PoolingConfig, heads: Sequence[nn.Module]) -> int:
    """Width of the vectors the pooling and the modules after it give, before truncation."""
    width = pooling.output_dim
    for module in heads:
        width = out_width(module, width)
    return width


def describe_model(
    model,
    *,
    prompt_name: str | None,
    prompt: str | None,
    task: PromptTask | None,
    truncate_dim: int | None,
    normalize: bool | None,
) -> dict:
    """The manifest fields shared by :class:`ModelInfo` and :class:`SentenceEncoder
    <sbert_core.inference.encoder.SentenceEncoder>`, for ``encode`` called with these arguments.

    ``model`` is either of them: what is read is ``model_id``, ``weights_sha256``, ``full_dim``,
    ``truncate_dim`` (the load-time default), ``pooling``, ``heads``, ``normalize``,
    ``max_seq_length`` and ``prompts``.

    Raises:
        ValueError: an unknown prompt name or task, both prompt and prompt_name, or a
            truncate_dim outside ``[1, full_dim]``.
    """
    prompt = model.prompts.resolve(prompt_name, prompt, task)
    truncate_dim = check_truncate_dim(
        truncate_dim if truncate_dim is not None else model.truncate_dim, model.full_dim
    )
    truncated = truncate_dim is not None and truncate_dim < model.full_dim
    return {
        "model_id": model.model_id,
        "weights_sha256": model.weights_sha256,
        "dim": truncate_dim or model.full_dim,
        "full_dim": model.full_dim,
        "truncate_dim": truncate_dim,
        "pooling": model.pooling.label,
        "include_prompt": model.pooling.include_prompt,
        "modules": ["Transformer", "Pooling", *(type(m).__name__ for m in model.heads)],
        "normalized": bool(normalize) or (normalize is None and model.normalize and not truncated),
        "max_seq_length": model.max_seq_length,
        "prompt": prompt,
        "prompt_name": model.prompts.name_of(prompt) if prompt else None,
    }


def _max_seq_length(layout: ModelLayout, config, tokenizer, requested: int | None) -> int:
    """The truncation length: explicit request, else the model's config, within position limits."""
    limits = [
        value
        for value in (getattr(config, "max_position_embeddings", None), tokenizer.model_max_length)
        if isinstance(value, int) and 0 < value < 1_000_000
    ]
    # RoBERTa-style models reserve two positions for the padding offset.
    if getattr(config, "model_type", "") in {"roberta", "xlm-roberta", "camembert"} and limits:
        limits[0] -= 2
    model_limit = min(limits) if limits else 512
    if requested is not None:
        if not 1 <= requested <= model_limit:
            raise ValueError(f"max_seq_length must be in [1, {model_limit}], got {requested}")
        return int(requested)
    return int(min(layout.max_seq_length or model_limit, model_limit))


def read_config_and_tokenizer_files(source: Path, directory: Path, *, plain_folder: bool) -> tuple:
    """The Hugging Face config and fast tokenizer in ``source`` (no remote code); a plain
    folder's tokenizer is checked to have no chat template. Bi- and cross-encoders read theirs
    here.

    Args:
        source: the folder holding ``config.json`` and the tokenizer files.
        directory: the model folder, named in the chat-template refusal.
        plain_folder: whether the model is a plain Hugging Face folder (no sentence-transformers
            files around it).

    Returns:
        ``(config, tokenizer)``.

    Raises:
        ModelLoadError: an unreadable config or tokenizer (one line naming ``source``), or a
            chat template in a plain folder.
    """
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
        tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError, StrictDataclassError) as err:
        # transformers checks the types of config fields (hidden_size: "2" is refused) with an
        # error of several lines; the refusal is one.
        reason = " ".join(str(err).split())
        raise ModelLoadError(
            f"{source}: could not read the config or tokenizer ({reason})"
        ) from err
    if plain_folder:
        check_plain_folder_tokenizer(tokenizer, directory)
    return config, tokenizer
