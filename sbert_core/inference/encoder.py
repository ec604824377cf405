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
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sbert_core.errors import ModelLoadError
from sbert_core.inference.batching import DEFAULT_TOKEN_BUDGET, length_sorted_batches, progress_bar
from sbert_core.inference.compute_paths import (
    ComputePath,
    prepare_transformer,
    resolve_compute_path,
)
from sbert_core.inference.encode_result import EncodeResult
from sbert_core.inference.precision import DtypeName, dtype_name
from sbert_core.inference.tokenizing import Tokenized, pad_token_ids, tokenize_texts
from sbert_core.model.head_modules import HeadModule, Normalize, check_truncate_dim, truncate
from sbert_core.model.info import (
    chain_width,
    describe_model,
    ends_normalized,
    inspect_model,
    load_transformer,
    with_normalize,
)
from sbert_core.model.pooling import PoolingConfig, PoolingMode, pool
from sbert_core.model.prompts import PromptSettings, PromptTask, prompt_token_count
from sbert_core.model.source import DEFAULT_MODEL

logger = logging.getLogger(__name__)
_BAR_LEVELS = (logging.INFO, logging.DEBUG)  # where encode shows its bar by default
Embeddings = np.ndarray | torch.Tensor | list[torch.Tensor]  # what encode returns


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

    # Set by load (what manifests record of the dtype path); None: the transformer's dtype.
    compute_path: ComputePath | None = None

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
        """Args are as :class:`~sbert_core.model.info.ModelInfo` holds them; ``normalize`` True
        ends the chain with a Normalize module (added if missing), False takes every one out."""
        super().__init__()
        self.transformer = transformer
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.heads = nn.ModuleList(with_normalize(list(heads), normalize))
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
        dtype: DtypeName | ComputePath = "float32",
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
            dtype: ``float32`` (default, exact), ``bfloat16``, ``float16`` (CUDA), ``auto`` or
                ``int8`` (CPU with VNNI), or a resolved path
                (:mod:`sbert_core.inference.compute_paths`).
            pooling: override the model's pooling (any mode of :mod:`sbert_core.model.pooling`).
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
        path = resolve_compute_path(dtype, device)
        info = inspect_model(
            model,
            allow_pickle=allow_pickle,
            pooling=pooling,
            normalize=normalize,
            max_seq_length=max_seq_length,
            truncate_dim=truncate_dim,
        )
        transformer = prepare_transformer(load_transformer(info, path.load_dtype), path, info)
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
        encoder.heads.to(path.load_dtype)
        encoder.compute_path = path
        return encoder

    # ------------------------------------------------------------------ properties

    @property
    def full_dim(self) -> int:
        """Width of the vectors the chain gives, before any truncation."""
        return chain_width(self.pooling, self.heads)

    @property
    def dim(self) -> int:
        """Width of the vectors :meth:`encode` gives by default (``truncate_dim`` if set)."""
        return self.truncate_dim or self.full_dim

    @property
    def normalize(self) -> bool:
        """Whether the chain ends with a Normalize module."""
        return ends_normalized(self.heads)

    @normalize.setter
    def normalize(self, value: bool) -> None:
        """True ends the chain with a Normalize module, False takes every one out."""
        self.heads = nn.ModuleList(with_normalize(list(self.heads), bool(value)))

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
            "dtype": dtype_name(self.dtype),
            **describe_model(
                self,
                prompt_name=prompt_name,
                prompt=prompt,
                task=task,
                truncate_dim=truncate_dim,
                normalize=normalize,
            ),
            **(self.compute_path.describe() if self.compute_path else {}),
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
        recording who was cut (see :func:`sbert_core.inference.tokenizing.tokenize_texts`).

        Raises:
            TypeError: an element is not a ``str``, naming its position.
        """
        return tokenize_texts(
            self.tokenizer,
            texts,
            prompt=prompt,
            max_seq_length=self.max_seq_length,
            lower=self.do_lower_case,
        )

    def pad(self, input_ids: Sequence[Sequence[int]]) -> dict[str, torch.Tensor]:
        """Pad token id lists into ``input_ids`` and ``attention_mask`` on our device, on the
        side the tokenizer pads (decoders such as Qwen3-Embedding pad on the left)."""
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        return pad_token_ids(input_ids, self._pad_id, left=left, device=self.device)

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
    ) -> Embeddings:
        """Embed one text or a sequence of texts, as sentence-transformers' ``encode`` does.

        Batches group texts of similar token length (the vectors do not depend on the batching).
        The number of truncated inputs is logged; :meth:`encode_detailed` returns it.

        Args:
            texts: one string (one vector comes back) or a sequence of strings.
            batch_size: at most this many texts per forward pass.
            token_budget: at most this many padded tokens per forward pass (default:
                :data:`sbert_core.inference.batching.DEFAULT_TOKEN_BUDGET`).
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
            show_progress_bar = show_progress or logger.getEffectiveLevel() in _BAR_LEVELS
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
        embeddings = self._as_requested(result, convert_to_tensor, convert_to_numpy)
        return embeddings[0] if single else embeddings

    def _as_requested(self, result: EncodeResult, to_tensor: bool, to_numpy: bool) -> Embeddings:
        """:meth:`encode`'s ``(N, d)`` embeddings in the type asked for; logs the truncations."""
        if result.n_truncated:
            logger.info(
                "%d of %d inputs were truncated at max_seq_length=%d",
                result.n_truncated,
                len(result.n_tokens),
                self.max_seq_length,
            )
        return result.converted(self.device, to_tensor=to_tensor, to_numpy=to_numpy)

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
        progress = progress_bar(len(batches), show_progress_bar or show_progress)
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
        """Write a directory sentence-transformers loads as-is (see
        :mod:`sbert_core.model.export`)."""
        from sbert_core.model.export import save_encoder

        return save_encoder(self, Path(path), overwrite=overwrite, extra_manifest=extra_manifest)
