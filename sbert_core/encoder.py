"""The SBERT encoder: transformer -> pooling -> Dense / LayerNorm / Normalize modules.

It computes what sentence-transformers computes for the same model directory (same
tokenisation, truncation, prompts, pooling, modules after pooling and Matryoshka truncation),
with batches formed by tokenised length so that little time is spent on padding.

Prompts and truncation follow sentence-transformers' ``encode``: the prompt text is prepended
to each text (``include_prompt=False`` pooling leaves its tokens out); the full chain runs, a
Normalize module included; then vectors are cut to ``truncate_dim`` and, only when
``normalize=True`` is asked for, L2-normalised again. So a model ending in Normalize gives
unit vectors truncated, which are no longer unit length unless ``normalize=True``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sbert_core.architectures import check_plain_folder_tokenizer, transformer_class
from sbert_core.artifact import (
    SAFETENSORS_FILE,
    SAFETENSORS_INDEX,
    ModelLayout,
    read_layout,
    safetensors_tensors,
    sha256_of_files,
    weight_files,
)
from sbert_core.batching import length_sorted_batches
from sbert_core.errors import ModelLoadError
from sbert_core.head_modules import (
    HeadModule,
    Normalize,
    check_truncate_dim,
    head_weight_file,
    load_head_module,
    out_width,
    truncate,
)
from sbert_core.model_source import DEFAULT_MODEL, resolve_model_dir
from sbert_core.pooling import PoolingConfig, PoolingMode, check_pooling_mode, pool
from sbert_core.precision import DtypeName, dtype_name, resolve_dtype
from sbert_core.prompts import PromptSettings, PromptTask, prompt_token_count
from sbert_core.weight_checks import (
    check_finite_weights,
    check_loaded_model,
    check_weight_coverage,
)

logger = logging.getLogger(__name__)

# Texts longer than max_seq_length * CUT_CHARS_PER_TOKEN characters are cut before tokenising.
# English averages about 4 characters per WordPiece token, and no word-splitting tokenizer spends
# more than a handful on one, so 32 leaves every kept token untouched in practice (the cut is
# widened when the prefix holds too few tokens, see SentenceEncoder._long_text_ids).
CUT_CHARS_PER_TOKEN = 32

# Padded tokens per forward pass when neither batch_size nor token_budget is given. On CPU,
# all-MiniLM-L6-v2 on 2 cores was fastest at 1-2k tokens (activations stay in cache; 16k was
# ~2x slower); GPUs want large batches to fill their cores.
DEFAULT_TOKEN_BUDGET = {"cpu": 2048, "cuda": 32768}


@dataclass(frozen=True)
class Tokenized:
    """Token ids of each text, unpadded, already truncated to ``max_seq_length``."""

    input_ids: list[list[int]]
    n_tokens: np.ndarray  # (N,) int32, special tokens included
    truncated: np.ndarray  # (N,) bool: the text had more than max_seq_length tokens


@dataclass(frozen=True)
class EncodeResult:
    """Embeddings plus per-text token counts and truncation flags, in input order."""

    embeddings: np.ndarray  # (N, d) float32
    n_tokens: np.ndarray  # (N,) int32
    truncated: np.ndarray  # (N,) bool

    @property
    def n_truncated(self) -> int:
        """How many inputs were cut at ``max_seq_length``."""
        return int(self.truncated.sum())


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
        return _chain_width(self.pooling, self.heads)

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
        return _description(
            self,
            self.prompts.resolve(prompt_name, prompt, task),
            check_truncate_dim(
                truncate_dim if truncate_dim is not None else self.truncate_dim, self.full_dim
            ),
            normalize,
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

    Safetensors weights are checked against the architecture of ``config.json`` (every
    parameter present with its shape, no foreign tensors) and for NaN/infinite values, one
    memory-mapped tensor at a time. The modules after pooling (Dense, LayerNorm) are small and
    are loaded here, their weights checked the same way.

    The model's identity, ``weights_sha256``, covers the transformer's weight files and then
    those of the modules after pooling, in chain order.

    Raises:
        ModelLoadError: missing or corrupt files, unsupported modules, unreachable hub id,
            weights that do not fit the architecture or hold NaN/infinite values.
        ValueError: unknown pooling mode, a max_seq_length beyond the model's limit, or a
            truncate_dim outside ``[1, dim]``.
    """
    from transformers import AutoConfig, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if pooling is not None:
        check_pooling_mode(pooling)
    directory, model_id = resolve_model_dir(model)
    layout = read_layout(directory)
    files = weight_files(layout.transformer_dir, allow_pickle=allow_pickle)
    source = layout.transformer_dir
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=False)
        tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"{source}: could not read the config or tokenizer ({err})") from err
    if not layout.is_sentence_transformer:
        check_plain_folder_tokenizer(tokenizer, directory)
    if layout.padding_side is not None:
        tokenizer.padding_side = layout.padding_side
    transformer_class(config, source / "config.json")
    uses_pickle = files[0].suffix != ".safetensors"
    if not uses_pickle:
        single = files[0].name == SAFETENSORS_FILE
        described_by = files[0] if single else source / SAFETENSORS_INDEX
        check_weight_coverage(safetensors_tensors(files), config, described_by)
        for path in files:
            check_finite_weights(path)

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
    heads: list[HeadModule] = []
    width = pooling_config.output_dim
    for entry in layout.heads:
        module = load_head_module(entry.kind, entry.path, allow_pickle=allow_pickle, width=width)
        heads.append(module)
        width = out_width(module, width)
    head_files = [f for f in (head_weight_file(entry.path) for entry in layout.heads) if f]
    heads = _with_normalize(heads, normalize)
    return ModelInfo(
        model_id=model_id,
        transformer_dir=source,
        weights_sha256=sha256_of_files([*files, *head_files]),
        uses_pickle=uses_pickle,
        pooling=pooling_config,
        normalize=_ends_normalized(heads),
        max_seq_length=_max_seq_length(layout, config, tokenizer, max_seq_length),
        do_lower_case=layout.do_lower_case,
        config=config,
        tokenizer=tokenizer,
        heads=tuple(heads),
        prompts=layout.prompts,
        truncate_dim=check_truncate_dim(truncate_dim, width),
    )


class SentenceEncoder(nn.Module):
    """A Sentence-BERT model: a Hugging Face encoder, a pooling strategy and the modules after it
    (Dense, LayerNorm, Normalize, Dropout), with the model's prompts.

    Build one with :meth:`load`. ``forward`` is differentiable (used by training);
    :meth:`encode` is the inference path.

    Example:
        >>> encoder = SentenceEncoder.load("all-MiniLM-L6-v2")
        >>> vectors = encoder.encode(["A man is playing a guitar.", "Someone plays music."])
        >>> vectors.shape
        (2, 384)
        >>> encoder.encode(["what is sbert?"], task="query", truncate_dim=128).shape
        (1, 128)
    """

    def __init__(
        self,
        transformer: nn.Module,
        tokenizer,
        *,
        pooling: PoolingConfig,
        normalize: bool,
        max_seq_length: int,
        do_lower_case: bool = False,
        model_id: str = "",
        weights_sha256: str | None = None,
        heads: Sequence[HeadModule] = (),
        prompts: PromptSettings | None = None,
        truncate_dim: int | None = None,
    ) -> None:
        """Args are as :class:`ModelInfo` holds them; ``normalize`` True ends the chain with a
        Normalize module (added if missing), False takes every Normalize module out."""
        super().__init__()
        self.transformer = transformer
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.heads = nn.ModuleList(_with_normalize(list(heads), normalize))
        self.prompts = prompts or PromptSettings()
        self.truncate_dim = check_truncate_dim(truncate_dim, self.full_dim)
        self._prompt_lengths: dict[tuple[str, int], int] = {}
        self.max_seq_length = max_seq_length
        self.do_lower_case = do_lower_case
        self.model_id = model_id
        self.weights_sha256 = weights_sha256
        if tokenizer.pad_token_id is None:
            raise ModelLoadError(f"{model_id}: the tokenizer defines no padding token")
        self._pad_id = int(tokenizer.pad_token_id)

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        model: str | os.PathLike = DEFAULT_MODEL,
        *,
        device: str | torch.device | None = None,
        dtype: DtypeName = "float32",
        pooling: PoolingMode | None = None,
        normalize: bool | None = None,
        max_seq_length: int | None = None,
        allow_pickle: bool = False,
        num_threads: int | None = None,
        truncate_dim: int | None = None,
    ) -> SentenceEncoder:
        """Load a model directory, the packaged default, or a hub id.

        Args:
            model: a sentence-transformers directory, a plain Hugging Face encoder directory
                (MEAN pooling), ``all-MiniLM-L6-v2``, or a Hugging Face Hub id.
            device: ``"cpu"``, ``"cuda"``, ...; default CUDA when available.
            dtype: ``float32`` (default, exact), ``bfloat16``, ``float16`` (CUDA) or ``auto``.
            pooling: override the model's pooling (any mode of :mod:`sbert_core.pooling`).
            normalize: True ends the chain with Normalize, False drops every Normalize module
                (default: the model's chain as saved).
            max_seq_length: override the truncation length (at most the model's limit).
            allow_pickle: accept ``pytorch_model.bin`` weights (they can run code when read).
            num_threads: torch intra-op threads for this process.
            truncate_dim: default Matryoshka truncation of ``encode`` (as sentence-transformers'
                ``truncate_dim``); None keeps every dimension.

        Raises:
            ModelLoadError: missing or corrupt files, unsupported modules, unreachable hub id.
            ValueError: unknown pooling mode or dtype, truncate_dim outside ``[1, dim]``.
        """
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        compute_dtype = resolve_dtype(dtype, device)
        info = inspect_model(
            model,
            allow_pickle=allow_pickle,
            pooling=pooling,
            normalize=normalize,
            max_seq_length=max_seq_length,
            truncate_dim=truncate_dim,
        )
        model_class = transformer_class(info.config, info.transformer_dir / "config.json")
        try:
            transformer, loading_info = model_class.from_pretrained(
                info.transformer_dir,
                config=info.config,
                dtype=compute_dtype,
                use_safetensors=not info.uses_pickle,
                trust_remote_code=False,
                output_loading_info=True,
            )
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise ModelLoadError(
                f"{info.transformer_dir}: could not load the weights ({err})"
            ) from err
        check_loaded_model(transformer, loading_info, info.transformer_dir)
        encoder = cls(
            transformer,
            info.tokenizer,
            pooling=info.pooling,
            normalize=info.normalize,
            max_seq_length=info.max_seq_length,
            do_lower_case=info.do_lower_case,
            model_id=info.model_id,
            weights_sha256=info.weights_sha256,
            heads=info.heads,
            prompts=info.prompts,
            truncate_dim=info.truncate_dim,
        )
        encoder.eval()
        encoder.to(device=device)
        # The transformer was loaded in the compute dtype, its float32 buffers (rotary inverse
        # frequencies) kept in float32 as sentence-transformers has them: casting the whole
        # module would round them and cost decoders accuracy in bf16.
        encoder.heads.to(compute_dtype)
        return encoder

    # ------------------------------------------------------------------ properties

    @property
    def full_dim(self) -> int:
        """Width of the vectors the chain gives, before any truncation."""
        return _chain_width(self.pooling, self.heads)

    @property
    def dim(self) -> int:
        """Width of the vectors :meth:`encode` gives by default (``truncate_dim`` if set)."""
        return self.truncate_dim or self.full_dim

    @property
    def normalize(self) -> bool:
        """Whether the chain ends with a Normalize module."""
        return _ends_normalized(self.heads)

    @normalize.setter
    def normalize(self, value: bool) -> None:
        """True ends the chain with a Normalize module, False takes every one out."""
        self.heads = nn.ModuleList(_with_normalize(list(self.heads), bool(value)))

    @property
    def device(self) -> torch.device:
        """Device the weights live on."""
        return next(self.transformer.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """Compute dtype of the transformer (outputs are always float32)."""
        return next(self.transformer.parameters()).dtype

    def describe(
        self,
        *,
        prompt_name: str | None = None,
        prompt: str | None = None,
        task: PromptTask | None = None,
        truncate_dim: int | None = None,
        normalize: bool | None = None,
    ) -> dict:
        """What manifests record about vectors ``encode`` gives with these arguments.

        Beyond the model (``weights_sha256``, ``pooling``, ``max_seq_length``) this names the
        prompt text applied (``prompt``, "" for none, and ``prompt_name`` when it is one of the
        model's), the output ``dim`` (``truncate_dim`` if any; ``full_dim`` before it) and
        whether the vectors are unit length (``normalized``): vectors made with different
        prompts or dimensions differ in these fields.

        Raises:
            ValueError: as :meth:`encode` for the same arguments.
        """
        return {
            **_description(
                self,
                self.prompts.resolve(prompt_name, prompt, task),
                check_truncate_dim(
                    truncate_dim if truncate_dim is not None else self.truncate_dim, self.full_dim
                ),
                normalize,
            ),
            "dtype": dtype_name(self.dtype),
        }

    def prompt_length(self, prompt: str) -> int:
        """Leading tokens of ``prompt + text`` that are the prompt's (what ``include_prompt``
        False leaves out of pooling), counted as sentence-transformers counts them."""
        key = (prompt, self.max_seq_length)
        if key not in self._prompt_lengths:
            self._prompt_lengths[key] = prompt_token_count(
                self.tokenizer,
                prompt,
                max_seq_length=self.max_seq_length,
                lower=self.do_lower_case,
            )
        return self._prompt_lengths[key]

    # ------------------------------------------------------------------ tokenising

    def tokenize(self, texts: Sequence[str], prompt: str = "") -> Tokenized:
        """Tokenise ``prompt + text`` without padding, truncating at ``max_seq_length`` and
        recording who was cut.

        Raises:
            TypeError: an element is not a ``str``, naming its position.
        """
        texts = _checked_texts(texts)
        if prompt:
            texts = [prompt + text for text in texts]
        if not texts:
            return Tokenized([], np.zeros(0, np.int32), np.zeros(0, bool))
        # Tokenising a whole 15 MiB text to keep its first max_seq_length tokens took 80 s and
        # 4 GB; a prefix of a generous number of characters per token gives the same first tokens.
        limit = self.max_seq_length * CUT_CHARS_PER_TOKEN
        whole = texts
        long_rows = [row for row, text in enumerate(texts) if len(text) > limit]
        if long_rows:
            texts = list(texts)
            for row in long_rows:
                texts[row] = _prefix_at_space(texts[row], limit)
        if self.do_lower_case:
            texts = [text.lower() for text in texts]
        ids = self._token_ids(texts, truncate=False)
        full_lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        for row in long_rows:
            texts[row], ids[row] = self._long_text_ids(whole[row], texts[row], ids[row], limit)
            full_lengths[row] = len(ids[row])
        too_long = np.flatnonzero(full_lengths > self.max_seq_length)
        if too_long.size:
            # Re-tokenise only the long ones with truncation: the tokenizer knows which special
            # tokens to keep, and counting first tells us exactly who was cut.
            cut = self._token_ids([texts[i] for i in too_long], truncate=True)
            for position, index in enumerate(too_long):
                ids[index] = cut[position]
        n_tokens = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
        return Tokenized(ids, n_tokens, full_lengths > self.max_seq_length)

    def _long_text_ids(
        self, whole: str, prefix: str, ids: list[int], limit: int
    ) -> tuple[str, list[int]]:
        """(text, token ids) of a text cut to ``prefix``: the prefix while it holds at least twice
        ``max_seq_length`` tokens (so the tokens it cuts lie far past the ones kept), else a
        prefix four times longer, up to the whole text (long runs of spaces, giant words).

        A text that stays cut has more than ``max_seq_length`` tokens, so it is flagged truncated.
        """
        while len(ids) <= 2 * self.max_seq_length and len(prefix) < len(whole):
            limit *= 4
            prefix = _prefix_at_space(whole, limit)
            if self.do_lower_case:
                prefix = prefix.lower()
            ids = self._token_ids([prefix], truncate=False)[0]
        return prefix, ids

    def _token_ids(self, texts: list[str], *, truncate: bool) -> list[list[int]]:
        return self.tokenizer(
            texts,
            add_special_tokens=True,
            truncation=truncate,
            max_length=self.max_seq_length if truncate else None,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )["input_ids"]

    def pad(self, input_ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """Pad token id lists into ``input_ids`` and ``attention_mask`` on our device, on the
        side the tokenizer pads (decoders such as Qwen3-Embedding pad on the left)."""
        width = max(len(ids) for ids in input_ids)
        padded = np.full((len(input_ids), width), self._pad_id, dtype=np.int64)  # (B, T)
        mask = np.zeros((len(input_ids), width), dtype=np.int64)  # (B, T)
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        for row, ids in enumerate(input_ids):
            start = width - len(ids) if left else 0
            padded[row, start : start + len(ids)] = ids
            mask[row, start : start + len(ids)] = 1
        device = self.device
        return {
            "input_ids": torch.from_numpy(padded).to(device),
            "attention_mask": torch.from_numpy(mask).to(device),
        }

    # ------------------------------------------------------------------ computing

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        normalize: bool | None = None,
        prompt_length: int = 0,
    ) -> torch.Tensor:
        """Sentence embeddings ``(B, full_dim)`` in float32 for padded token ids ``(B, T)``
        (computed in the transformer's dtype after pooling, as sentence-transformers does).

        Args:
            normalize: None runs the chain as it is; False skips its Normalize modules (the
                vectors before normalisation); True makes sure the output is L2-normalised.
            prompt_length: leading prompt tokens of every row (:meth:`prompt_length`), left out
                of pooling when the model's pooling has ``include_prompt`` False.
        """
        hidden = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask
        ).last_hidden_state  # (B, T, h)
        # Pool in float32 even when the transformer runs in bf16/fp16: sums over many tokens
        # lose precision in 8-bit mantissas. The pooled vector then goes on in the compute
        # dtype, as in sentence-transformers (a no-op in float32).
        embeddings = pool(
            hidden.float(),
            attention_mask,
            self.pooling.mode,
            prompt_length=0 if self.pooling.include_prompt else prompt_length,
        ).to(hidden.dtype)  # (B, h * number of modes)
        for module in self.heads:
            if normalize is False and isinstance(module, Normalize):
                continue
            embeddings = module(embeddings)  # (B, d)
        if normalize and not self.normalize:
            embeddings = F.normalize(embeddings, p=2, dim=1)
        return embeddings.float()

    def encode(
        self,
        texts: str | Sequence[str],
        *,
        batch_size: int | None = None,
        token_budget: int | None = None,
        normalize: bool | None = None,
        normalize_embeddings: bool = False,
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        show_progress_bar: bool | None = None,
        show_progress: bool = False,
        prompt_name: str | None = None,
        prompt: str | None = None,
        task: PromptTask | None = None,
        truncate_dim: int | None = None,
    ) -> np.ndarray | torch.Tensor | list[torch.Tensor]:
        """Embed one text or a sequence of texts, as sentence-transformers' ``encode`` does.

        Batches are formed from texts of similar token length, by ``batch_size`` texts and/or a
        ``token_budget`` of padded tokens (default: a budget of ``DEFAULT_TOKEN_BUDGET``; the
        vectors do not depend on the batching). The number of truncated inputs is logged; use
        :meth:`encode_detailed` to get it.

        Args:
            texts: one string (one vector comes back) or a sequence of strings.
            batch_size: at most this many texts per forward pass.
            token_budget: at most this many padded tokens per forward pass.
            normalize: None keeps the model's chain (sentence-transformers' default), True
                L2-normalises the final (truncated) vectors, False drops Normalize modules.
            normalize_embeddings: sentence-transformers' name for ``normalize=True``: unit
                vectors after truncation (not together with ``normalize=False``).
            convert_to_numpy: a float32 numpy array (the default); False without
                ``convert_to_tensor`` gives a list of 1-d tensors, one per text.
            convert_to_tensor: one float32 ``torch.Tensor`` on the model's device; wins over
                ``convert_to_numpy``.
            show_progress_bar: a tqdm bar over the batches on stderr; None (the default) shows
                it when this module's logger is at INFO or DEBUG, as sentence-transformers does
                with its own logger.
            show_progress: the older name of ``show_progress_bar=True``.
            prompt_name: one of the model's prompts (``self.prompts.prompts``) to prepend.
            prompt: a prompt text to prepend instead (not with ``prompt_name``).
            task: ``"query"`` or ``"document"``: the model's prompt of that name when neither
                is given (what :meth:`encode_query` / :meth:`encode_document` pass); without
                any of the three, the model's default prompt, if it names one.
            truncate_dim: keep the first components only (default: the load-time one).

        Returns:
            For a sequence of N texts ``(N, d)`` float32 (a numpy array, a tensor, or a list of N
            tensors of shape ``(d,)``); for one string the single row ``(d,)`` of that type.
            No texts give ``(0, d)``.

        Raises:
            TypeError: an element is not a ``str`` (naming its position), or an unknown keyword.
            ValueError: an unknown prompt name or task, both prompt and prompt_name, a
                truncate_dim outside ``[1, full_dim]``, a batch_size or token_budget below 1,
                or ``normalize=False`` with ``normalize_embeddings=True``.

        Example:
            >>> encoder.encode("A man is playing a guitar.").shape
            (384,)
            >>> encoder.encode(["a", "b"], normalize_embeddings=True, convert_to_tensor=True).shape
            torch.Size([2, 384])
        """
        single = isinstance(texts, str)
        if show_progress_bar is None:
            show_progress_bar = show_progress or logger.getEffectiveLevel() in (
                logging.INFO,
                logging.DEBUG,
            )
        result = self.encode_detailed(
            [texts] if single else texts,
            batch_size=batch_size,
            token_budget=token_budget,
            normalize=normalize,
            normalize_embeddings=normalize_embeddings,
            show_progress_bar=show_progress_bar,
            prompt_name=prompt_name,
            prompt=prompt,
            task=task,
            truncate_dim=truncate_dim,
        )
        if result.n_truncated:
            logger.info(
                "%d of %d inputs were truncated at max_seq_length=%d",
                result.n_truncated,
                len(result.n_tokens),
                self.max_seq_length,
            )
        embeddings = result.embeddings  # (N, d)
        if convert_to_tensor or not convert_to_numpy:
            # sentence-transformers leaves tensors on the model's device.
            embeddings = torch.from_numpy(embeddings).to(self.device)
            if not convert_to_tensor:
                embeddings = list(embeddings)
        return embeddings[0] if single else embeddings

    def encode_query(self, texts: str | Sequence[str], **options) -> np.ndarray | torch.Tensor:
        """:meth:`encode` with ``task="query"``: the model's ``query`` prompt unless a prompt or
        prompt name is given (no prompt if the model has none, not its default prompt), as
        sentence-transformers' ``encode_query``. Takes the other keywords of :meth:`encode`."""
        return self.encode(texts, task="query", **options)

    def encode_document(self, texts: str | Sequence[str], **options) -> np.ndarray | torch.Tensor:
        """:meth:`encode` with ``task="document"``: the model's ``document`` prompt unless a
        prompt or prompt name is given, as sentence-transformers' ``encode_document``. Takes
        the other keywords of :meth:`encode`."""
        return self.encode(texts, task="document", **options)

    def encode_detailed(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        token_budget: int | None = None,
        normalize: bool | None = None,
        normalize_embeddings: bool = False,
        show_progress_bar: bool = False,
        show_progress: bool = False,
        prompt_name: str | None = None,
        prompt: str | None = None,
        task: PromptTask | None = None,
        truncate_dim: int | None = None,
    ) -> EncodeResult:
        """Like :meth:`encode` for a sequence of texts, returning numpy embeddings ``(N, d)``
        with the token counts and truncation flags per text (counted over ``prompt + text``).

        The bar is off unless asked for (pipelines call this once per batch of records).

        Raises:
            TypeError: ``texts`` is a single string (``encode`` takes one), or as :meth:`encode`.
            ValueError: as :meth:`encode`.
        """
        if normalize_embeddings:
            if normalize is False:
                raise ValueError(
                    "normalize=False and normalize_embeddings=True contradict each other; "
                    "give one of them"
                )
            normalize = True
        prompt_text = self.prompts.resolve(prompt_name, prompt, task)
        dim = check_truncate_dim(
            truncate_dim if truncate_dim is not None else self.truncate_dim, self.full_dim
        )
        prompt_length = self.prompt_length(prompt_text)
        tokens = self.tokenize(texts, prompt=prompt_text)
        n = len(tokens.input_ids)
        embeddings = np.empty((n, dim or self.full_dim), dtype=np.float32)
        if batch_size is None and token_budget is None:
            token_budget = DEFAULT_TOKEN_BUDGET.get(self.device.type, 2048)
        batches = length_sorted_batches(
            tokens.n_tokens, batch_size=batch_size, token_budget=token_budget
        )
        progress = _progress_bar(len(batches), show_progress_bar or show_progress)
        with torch.inference_mode():
            for indices in batches:
                features = self.pad([tokens.input_ids[i] for i in indices])
                batch = self(
                    **features,
                    normalize=False if normalize is False else None,
                    prompt_length=prompt_length,
                )  # (B, full_dim)
                # sentence-transformers' order: the whole chain, then truncation, then
                # normalisation only when asked for.
                batch = truncate(batch, dim)
                if normalize:
                    batch = F.normalize(batch, p=2, dim=1)
                embeddings[indices] = batch.cpu().numpy()
                if progress is not None:
                    progress.update(1)
        if progress is not None:
            progress.close()
        return EncodeResult(embeddings, tokens.n_tokens, tokens.truncated)

    # ------------------------------------------------------------------ saving

    def save(
        self, path: str | os.PathLike, *, overwrite: bool = False, extra_manifest=None
    ) -> Path:
        """Write a directory sentence-transformers loads as-is (see :mod:`sbert_core.export`)."""
        from sbert_core.export import save_encoder

        return save_encoder(self, Path(path), overwrite=overwrite, extra_manifest=extra_manifest)


def _with_normalize(heads: list[HeadModule], normalize: bool | None) -> list[HeadModule]:
    """The chain with the ``normalize`` override: None as is, False without any Normalize
    module, True ending with one."""
    if normalize is False:
        return [module for module in heads if not isinstance(module, Normalize)]
    if normalize and not _ends_normalized(heads):
        return [*heads, Normalize()]
    return list(heads)


def _ends_normalized(heads: Sequence[nn.Module]) -> bool:
    return bool(heads) and isinstance(heads[-1], Normalize)


def _chain_width(pooling: PoolingConfig, heads: Sequence[nn.Module]) -> int:
    width = pooling.output_dim
    for module in heads:
        width = out_width(module, width)
    return width


def _description(model, prompt: str, truncate_dim: int | None, normalize: bool | None) -> dict:
    """The manifest fields shared by :class:`ModelInfo` and :class:`SentenceEncoder`."""
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


def _prefix_at_space(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, at the last space or line break if one lies
    in the second half (tokenizers split words there, so the prefix's tokens are the text's)."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind(space, limit // 2, limit + 1) for space in " \n\t")
    return text[:cut] if cut > 0 else text[:limit]


def _checked_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(
            "texts must be a sequence of strings, not a single string "
            "(encode() takes one string and returns one vector)"
        )
    try:
        texts = list(texts)
    except TypeError:
        raise TypeError(
            f"texts must be a string or a sequence of strings, got {type(texts).__name__}"
        ) from None
    for position, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{position}] is {type(text).__name__}, expected str")
    return texts


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


def _progress_bar(n_batches: int, enabled: bool):
    """sentence-transformers' bar: one step per batch, on stderr."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=n_batches, desc="Batches", unit="batch")
