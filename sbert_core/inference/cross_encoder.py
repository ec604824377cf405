"""The cross-encoder: both texts of a pair through one sequence-classification model, one score.

It computes what sentence-transformers' ``CrossEncoder.predict`` computes for the same folder:
the pair tokenised as a pair (``[CLS] a [SEP] b [SEP]`` with token type ids where the
architecture has them), truncated ``longest_first`` at the model's max length, the logits put
through the activation function the folder saved (Sigmoid for one label, Identity otherwise, by
default), ``(n,)`` scores for one label and ``(n, labels)`` otherwise. Pairs are batched by
tokenised length (smart batching) and the scores put back in input order.

The folder is checked as :class:`~sbert_core.inference.encoder.SentenceEncoder` checks its own:
no pickle weights without ``allow_pickle``, no remote code, the config checked against the
weights before anything is built, every tensor present with its shape and finite.

It runs the bi-encoder's compute paths (:mod:`sbert_core.inference.compute_paths`, with the same
names and refusals; :mod:`sbert_core.inference.cross_encoder_paths` applies them to the
classifier): float32 (the default, sentence-transformers' scores), bfloat16, float16 (CUDA),
``auto``, int8 (CPU with VNNI), and on CPU the OpenVINO backend in float32, bfloat16 (native
bf16 only) or int8. :meth:`CrossEncoder.describe` names the path that ran, and the identity
changes with the dtype and the backend, as scores do.

Example:
    >>> model = CrossEncoder.load("path/to/cross-encoder")
    >>> model.predict([("How old are you?", "What is your age?")]).shape
    (1,)
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import platform
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sbert_core.errors import ModelLoadError
from sbert_core.inference.batching import length_sorted_batches, progress_bar
from sbert_core.inference.compute_paths import TORCH, ComputePath, resolve_compute_path
from sbert_core.inference.cross_encoder_paths import pad_pairs, prepare_classifier
from sbert_core.inference.precision import DtypeName, dtype_name
from sbert_core.inference.tokenizing import CUT_CHARS_PER_TOKEN
from sbert_core.model.artifact import (
    MANIFEST_FILE,
    SAFETENSORS_FILE,
    sha256_of_files,
    weight_files,
)
from sbert_core.model.cross_encoder_folder import (
    activation_path,
    load_classifier,
    max_length_of,
    read_config_and_tokenizer,
    read_cross_encoder_layout,
    resolve_activation,
    write_cross_encoder_files,
)
from sbert_core.model.export import staged_model_folder
from sbert_core.model.source import CROSS_ENCODERS, resolve_model_dir
from sbert_core.model.weight_checks import check_loaded_model

logger = logging.getLogger(__name__)

Pair = tuple[str, str]


class CrossEncoder(nn.Module):
    """A sentence-transformers CrossEncoder: a sequence-classification model that scores pairs.

    Build one with :meth:`load`; :meth:`predict` scores pairs, :meth:`save` writes a folder
    sentence-transformers loads.

    Example:
        >>> model = CrossEncoder.load("my-cross-encoder", device="cpu")
        >>> model.predict([("a man plays guitar", "someone makes music")], batch_size=16)
        array([0.93], dtype=float32)
    """

    # Set by load (what describe records of the dtype path); None: float32-like on torch, in
    # the classifier's dtype (a model built in memory, e.g. by training).
    compute_path: ComputePath | None = None

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        *,
        activation: nn.Module,
        max_length: int,
        do_lower_case: bool = False,
        model_id: str = "",
        weights_sha256: str | None = None,
    ) -> None:
        """Args are what :meth:`load` reads from the folder: the sequence-classification model,
        its tokenizer, the activation module, the truncation length of a pair (special tokens
        included), whether texts are lower-cased, and the model's id and weight checksum."""
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.activation = activation
        self.max_length = int(max_length)
        self.do_lower_case = do_lower_case
        self.model_id = model_id
        self.weights_sha256 = weights_sha256
        if tokenizer.pad_token_id is None:
            raise ModelLoadError(f"{model_id}: the tokenizer defines no padding token")
        self._pad_id = int(tokenizer.pad_token_id)
        # Token type ids go to the model only when its forward takes them (BERT yes, RoBERTa and
        # DistilBERT no), as sentence-transformers filters features by the forward's signature.
        self._takes_token_types = "token_type_ids" in inspect.signature(model.forward).parameters

    # ------------------------------------------------------------------ loading

    @classmethod
    def load(
        cls,
        model: str | os.PathLike,
        *,
        device: str | torch.device | None = None,
        dtype: DtypeName | ComputePath | torch.dtype = "float32",
        backend: str = TORCH,
        allow_pickle: bool = False,
        max_length: int | None = None,
        num_threads: int | None = None,
    ) -> CrossEncoder:
        """Load a sentence-transformers CrossEncoder folder (or a Hugging Face
        sequence-classification folder, as sentence-transformers 2-5 saved them).

        Args:
            model: a local folder; any other name is taken for a Hugging Face Hub id, which
                fails with advice when the hub cannot be reached (offline).
            device: ``"cpu"``, ``"cuda"``, ...; default CUDA when available.
            dtype: ``float32`` (default, sentence-transformers' scores), ``bfloat16``,
                ``float16`` (CUDA), ``auto`` or ``int8`` (CPU with VNNI), or a resolved path
                (:mod:`sbert_core.inference.compute_paths`).
            backend: what runs the classifier: ``torch``, or ``openvino`` (CPU; float32,
                bfloat16 or int8).
            allow_pickle: accept ``pytorch_model.bin`` weights (they can run code when read).
            max_length: override the truncation length of a pair (at most the model's
                position limit); default the folder's, as sentence-transformers reads it.
            num_threads: torch intra-op threads for this process.

        Raises:
            ModelLoadError: missing, corrupt or foreign files, an unsupported folder, pickle
                weights without ``allow_pickle``, an unreachable hub id.
            ValueError: a max_length outside the model's range; a dtype or backend this
                machine cannot run, as
                :func:`~sbert_core.inference.compute_paths.resolve_compute_path` refuses it.
        """
        if num_threads is not None:
            torch.set_num_threads(num_threads)  # before OpenVINO compiles: it takes this count
        device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if isinstance(dtype, torch.dtype):
            dtype = dtype_name(dtype)
        path = resolve_compute_path(dtype, device, backend)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        directory, model_id = resolve_model_dir(model, organization=CROSS_ENCODERS)
        layout = read_cross_encoder_layout(directory)
        source = layout.transformer_dir
        files = weight_files(source, allow_pickle=allow_pickle)
        config, tokenizer = read_config_and_tokenizer(layout, directory)
        # The base model's tensors are checked from the headers; the classification head
        # (classifier, pooler) is checked by from_pretrained's loading info below.
        classifier, loading_info = load_classifier(source, config, files, path.load_dtype)
        check_loaded_model(classifier, loading_info, source)
        num_labels = int(classifier.config.num_labels)
        encoder = cls(
            classifier,
            tokenizer,
            activation=resolve_activation(layout.activation_path, num_labels, source),
            max_length=max_length_of(config, tokenizer, layout.max_seq_length, max_length),
            do_lower_case=layout.do_lower_case,
            model_id=model_id,
            weights_sha256=sha256_of_files(files),
        )
        encoder.eval()
        encoder.to(device=device)
        encoder.model = prepare_classifier(encoder, path)
        encoder.compute_path = path
        return encoder

    # ------------------------------------------------------------------ properties

    @property
    def num_labels(self) -> int:
        """Scores per pair: 1 gives ``(n,)`` scores, more give ``(n, num_labels)``."""
        return int(self.model.config.num_labels)

    @property
    def device(self) -> torch.device:
        """Device the weights live on."""
        return next(self.model.parameters()).device

    @property
    def takes_token_types(self) -> bool:
        """Whether the classifier's forward takes ``token_type_ids`` (BERT yes, RoBERTa no)."""
        return self._takes_token_types

    @property
    def resolved_path(self) -> ComputePath:
        """The compute path that runs: :attr:`compute_path` as :meth:`load` resolved it, or for
        a model built in memory the classifier's dtype on torch."""
        if self.compute_path is not None:
            return self.compute_path
        dtype = next(self.model.parameters()).dtype
        return ComputePath(dtype_name(dtype), dtype, self.device.type)

    def settings(self) -> dict:
        """The settings that, with the weights, decide the scores (what :attr:`identity`
        hashes besides ``weights_sha256``): the compute dtype, and the backend when it is not
        torch (torch float32 identities are those of float32-only releases)."""
        path = self.resolved_path
        settings = {
            "kind": "cross_encoder",
            "num_labels": self.num_labels,
            "max_length": self.max_length,
            "activation_fn": activation_path(self.activation),
            "do_lower_case": self.do_lower_case,
            "dtype": path.name,
        }
        if path.backend != TORCH:
            settings["backend"] = path.backend
        return settings

    @property
    def identity(self) -> str:
        """SHA-256 over the weights' SHA-256 and :meth:`settings`: equal identities give equal
        scores (the bi-encoder's ``weights_sha256`` plus the settings manifests record)."""
        return _identity(self.weights_sha256, self.settings())

    def describe(self) -> dict:
        """What manifests record about the scores: model id, weight checksum, settings, the
        identity over them, and ``compute``: the path that ran, as the bi-encoder's describe
        names it (path, device, backend, quantizer, engine, CPU features)."""
        return {
            "model_id": self.model_id,
            "weights_sha256": self.weights_sha256,
            **self.settings(),
            "identity": self.identity,
            "compute": self.resolved_path.describe()["compute"],
        }

    # ------------------------------------------------------------------ computing

    def tokenize(self, pairs: Sequence[Pair]) -> tuple[dict[str, list[list[int]]], np.ndarray]:
        """Token ids of each pair, unpadded, truncated ``longest_first`` at :attr:`max_length`.

        Returns:
            ``({"input_ids": [...], "token_type_ids": [...]?}, n_tokens (N,) int64)``; token
            type ids only where the tokenizer makes them.

        Raises:
            TypeError: an element is not a pair of strings, naming its position.
        """
        pairs = _checked_pairs(pairs)
        if not pairs:
            return {"input_ids": []}, np.zeros(0, np.int64)
        if self.do_lower_case:
            pairs = [(a.lower(), b.lower()) for a, b in pairs]
        pairs = [_cut_long_pair(self.tokenizer, a, b, self.max_length) for a, b in pairs]
        firsts = [a for a, _ in pairs]
        seconds = [b for _, b in pairs]
        encoded = self.tokenizer(
            firsts,
            seconds,
            truncation="longest_first",
            max_length=self.max_length,
            padding=False,
            return_attention_mask=False,
            verbose=False,
        )
        features = {"input_ids": encoded["input_ids"]}
        if "token_type_ids" in encoded and self._takes_token_types:
            features["token_type_ids"] = encoded["token_type_ids"]
        lengths = np.fromiter((len(ids) for ids in features["input_ids"]), np.int64, len(pairs))
        return features, lengths

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``(B, num_labels)`` in float32 for padded pairs ``(B, T)``, before the
        activation (training puts its loss on these)."""
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        output = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra)
        return output.logits.float()

    def predict(
        self,
        pairs: Sequence[Pair] | Pair,
        batch_size: int = 32,
        *,
        token_budget: int | None = None,
        apply_softmax: bool = False,
        show_progress_bar: bool = False,
    ) -> np.ndarray | np.float32:
        """Score pairs as sentence-transformers' ``CrossEncoder.predict`` does.

        Args:
            pairs: a sequence of ``(text, text)`` pairs, or one pair.
            batch_size: at most this many pairs per forward pass.
            token_budget: also at most this many padded tokens per forward pass.
            apply_softmax: with several labels, softmax over each pair's scores (after the
                activation), as sentence-transformers' ``apply_softmax``.
            show_progress_bar: a tqdm bar over the batches on stderr.

        Returns:
            float32 scores: ``(n,)`` for one label, ``(n, num_labels)`` otherwise, in input
            order; for one pair its score (a scalar, or ``(num_labels,)``).

        Raises:
            TypeError: an element is not a pair of strings, naming its position.
            ValueError: a batch_size or token_budget below 1.
        """
        single = _is_single_pair(pairs)
        features, lengths = self.tokenize([pairs] if single else pairs)
        n = len(lengths)
        shape = (n,) if self.num_labels == 1 else (n, self.num_labels)
        scores = np.empty(shape, dtype=np.float32)
        batches = length_sorted_batches(lengths, batch_size=batch_size, token_budget=token_budget)
        progress = progress_bar(len(batches), show_progress_bar)
        self.eval()  # dropout off, whatever training did to the module before
        with torch.inference_mode():
            for indices in batches:
                logits = self(**pad_pairs(self, features, indices))  # (B, num_labels)
                batch_scores = self.activation(logits)
                if self.num_labels == 1:
                    batch_scores = batch_scores.squeeze(-1)  # (B,)
                elif apply_softmax:
                    batch_scores = torch.softmax(batch_scores, dim=1)
                scores[indices] = batch_scores.float().cpu().numpy()
                if progress is not None:
                    progress.update(1)
        if progress is not None:
            progress.close()
        return scores[0] if single else scores

    # ------------------------------------------------------------------ saving

    def save(self, path: str | os.PathLike, *, overwrite: bool = False) -> Path:
        """Write a folder sentence-transformers' ``CrossEncoder`` loads to the same scores:
        safetensors weights, tokenizer (its ``model_max_length`` our :attr:`max_length`),
        ``config.json`` with the activation, the sentence-transformers 6 files, and our
        ``sbert_manifest.json``. The folder is built beside ``path`` and renamed into place.

        Raises:
            FileExistsError: ``path`` exists and is not empty, and ``overwrite`` is False.
            ValueError: the model runs another path than float32 on torch (its weights are
                rounded, quantized or compiled; the folder must hold the float32 ones).
        """
        import transformers

        from sbert_core.version import __version__

        running = self.resolved_path
        if running.name != "float32" or running.backend != TORCH:
            raise ValueError(
                f"save() writes float32 weights, and this cross-encoder runs {running.name} on "
                f"{running.backend}; load it with dtype='float32', backend='torch' to save it"
            )
        path = Path(path)
        with staged_model_folder(path, overwrite=overwrite) as staging:
            self.model.save_pretrained(staging, safe_serialization=True)
            # sentence-transformers 6 keeps the max length as the tokenizer's model_max_length.
            saved_length = self.tokenizer.model_max_length
            try:
                self.tokenizer.model_max_length = self.max_length
                self.tokenizer.save_pretrained(staging)
            finally:
                self.tokenizer.model_max_length = saved_length
            versions = {
                "sbert_pipeline": __version__,
                "transformers": transformers.__version__,
                "pytorch": torch.__version__,
            }
            write_cross_encoder_files(
                staging,
                activation=activation_path(self.activation),
                do_lower_case=self.do_lower_case,
                versions=versions,
            )
            weights_sha256 = sha256_of_files([staging / SAFETENSORS_FILE])
            description = self.describe()
            del description["compute"]  # the machine that saved, not the model
            manifest = {
                **description,
                "weights_sha256": weights_sha256,
                "identity": _identity(weights_sha256, self.settings()),
                "source": {"model_id": self.model_id, "weights_sha256": self.weights_sha256},
                "software": {**versions, "python": platform.python_version()},
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (staging / MANIFEST_FILE).write_text(
                json.dumps(manifest, indent=2) + "\n", encoding="utf-8"
            )
        return path


def _identity(weights_sha256: str | None, settings: dict) -> str:
    """SHA-256 of the canonical JSON of the weights' checksum and the settings."""
    payload = {"weights_sha256": weights_sha256, **settings}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def _cut_long_pair(tokenizer, a: str, b: str, max_length: int) -> tuple[str, str]:
    """The pair with a very long text cut to a prefix that gives the same tokens.

    Tokenising a whole 15 MiB text to keep its first tokens took the bi-encoder 80 s.
    ``longest_first`` keeps at most ``max_length`` tokens of a text, and which text is the
    longer decides where an odd token goes. So one long text is cut at a space to a prefix
    holding twice ``max_length`` tokens and more than the other text (the longer stays the
    longer); when both texts are long neither is cut, as prefixes cannot tell which is longer.
    """
    limit = max_length * CUT_CHARS_PER_TOKEN
    if (len(a) > limit) == (len(b) > limit):
        return a, b
    if len(b) > limit:
        cut_b, _ = _cut_long_pair(tokenizer, b, a, max_length)
        return a, cut_b
    need = max(2 * max_length, len(_plain_ids(tokenizer, b)) + 1)
    while len(a) > limit:
        space = a.rfind(" ", limit // 2, limit + 1)
        prefix = a[: space if space > 0 else limit]
        if len(_plain_ids(tokenizer, prefix)) >= need:
            return prefix, b
        limit *= 4
    return a, b


def _plain_ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]


def _is_single_pair(pairs) -> bool:
    return (
        isinstance(pairs, (tuple, list))
        and len(pairs) == 2
        and all(isinstance(text, str) for text in pairs)
    )


def _checked_pairs(pairs) -> list[Pair]:
    if isinstance(pairs, str):
        raise TypeError("pairs must be a sequence of (text, text) pairs, not a string")
    if isinstance(pairs, np.ndarray):
        pairs = pairs.tolist()  # an (n, 2) array of strings, as sentence-transformers takes
    try:
        pairs = list(pairs)
    except TypeError:
        raise TypeError(
            f"pairs must be a sequence of (text, text) pairs, got {type(pairs).__name__}"
        ) from None
    for position, pair in enumerate(pairs):
        if (
            isinstance(pair, str)
            or not isinstance(pair, Sequence)
            or len(pair) != 2
            or not all(isinstance(text, str) for text in pair)
        ):
            raise TypeError(f"pairs[{position}] is {pair!r:.80}, expected a pair of str")
    return [(str(a), str(b)) for a, b in pairs]
