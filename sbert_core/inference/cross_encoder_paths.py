"""The cross-encoder's compute paths (the bi-encoder's, applied to a sequence classifier) and
the padded pair batches every path is given (:func:`pad_pairs`).

:class:`~sbert_core.inference.cross_encoder.CrossEncoder` resolves its path with
:func:`~sbert_core.inference.compute_paths.resolve_compute_path` (the same names, backends and
refusals as the bi-encoder: float16 off CUDA, int8 off CPU or without VNNI, OpenVINO bf16
without native bf16, ...) and hands the loaded classifier to :func:`prepare_classifier`:

* ``float32`` / ``bfloat16`` / ``float16`` on torch: the classifier as loaded, in that dtype
  (the logits are put through the activation in float32).
* ``int8`` on torch: every ``nn.Linear`` dynamically quantized, the classification head
  included, as :func:`~sbert_core.inference.compute_paths.prepare_transformer` does for the
  bi-encoder's transformer.
* OpenVINO (``float32``, ``bfloat16``, ``int8``): the classifier converted to give its logits
  (:mod:`sbert_core.inference.openvino_path`) with ``token_type_ids`` as an input where the
  model takes them, checked against torch on a padded probe pair batch; int8 is NNCF's static
  quantization calibrated on fixed pairs of the calibration texts (:func:`calibration_pairs`),
  so every worker builds the same model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from sbert_core.inference.batching import length_sorted_batches
from sbert_core.inference.compute_paths import INT8, TORCH, ComputePath, prepare_transformer
from sbert_core.inference.tokenizing import pad_token_ids


class PairModel(Protocol):
    """What these helpers use of :class:`sbert_core.inference.cross_encoder.CrossEncoder`
    (typed structurally: that module imports this one)."""

    model: nn.Module
    tokenizer: Any
    takes_token_types: bool

    @property
    def device(self) -> torch.device: ...

    def tokenize(self, pairs: Sequence[tuple[str, str]]) -> tuple[dict, np.ndarray]: ...

    def predict(self, pairs: Sequence[tuple[str, str]], **kwargs: Any) -> np.ndarray: ...


# Pairs per calibration batch of the OpenVINO int8 path (300 pairs: 19 batches).
_CALIBRATION_BATCH = 16


def calibration_pairs() -> list[tuple[str, str]]:
    """300 fixed pairs: each calibration text with the next one (the last with the first), so
    every text is seen once as the first and once as the second of a pair."""
    from sbert_core.inference.calibration_texts import CALIBRATION_TEXTS

    texts = list(CALIBRATION_TEXTS)
    return [(text, texts[(i + 1) % len(texts)]) for i, text in enumerate(texts)]


def pad_pairs(
    encoder: PairModel,
    features: dict[str, list[list[int]]],
    indices: Sequence[int],
    device: torch.device | None = None,
) -> dict[str, torch.Tensor]:
    """The pairs ``indices`` of ``encoder.tokenize``'s ``features`` padded into ``(B, T)``
    tensors (``input_ids``, ``attention_mask``, ``token_type_ids`` where tokenised) on
    ``device`` (default the encoder's), on the side and with the ids its tokenizer pads with:
    what every path's classifier is given."""
    device = device or encoder.device
    tokenizer = encoder.tokenizer
    left = getattr(tokenizer, "padding_side", "right") == "left"
    pad_id = int(tokenizer.pad_token_id)
    batch = pad_token_ids(
        [features["input_ids"][i] for i in indices], pad_id, left=left, device=device
    )
    if "token_type_ids" in features:
        types = [features["token_type_ids"][i] for i in indices]
        pad_type = int(getattr(tokenizer, "pad_token_type_id", 0) or 0)
        batch["token_type_ids"] = pad_token_ids(types, pad_type, left=left, device=device)[
            "input_ids"
        ]
    return batch


def padded_pair_batches(
    encoder: PairModel, pairs: list[tuple[str, str]], *, batch_size: int
) -> list[dict[str, np.ndarray]]:
    """``pairs`` tokenised and padded as ``encoder.predict`` does, in length-sorted batches of
    at most ``batch_size`` pairs: the classifier's inputs as numpy arrays (``input_ids``,
    ``attention_mask`` and ``token_type_ids`` where the model takes them)."""
    features, lengths = encoder.tokenize(pairs)
    batches = []
    for indices in length_sorted_batches(lengths, batch_size=batch_size):
        padded = pad_pairs(encoder, features, indices, torch.device("cpu"))
        if encoder.takes_token_types and "token_type_ids" not in padded:
            # The converted model has the input; Hugging Face defaults it to zeros.
            padded["token_type_ids"] = torch.zeros_like(padded["input_ids"])
        batches.append({name: tensor.numpy() for name, tensor in padded.items()})
    return batches


def prepare_classifier(encoder: PairModel, path: ComputePath) -> nn.Module:
    """``encoder``'s sequence classifier (loaded in ``path.load_dtype``) ready to run ``path``:
    itself, its int8 dynamically quantized copy, or an
    :class:`~sbert_core.inference.openvino_path.OpenVINOTransformer` giving its logits.

    Raises:
        ValueError: the OpenVINO conversion fails or gives other logits than torch on the
            probe batch (the message names the model class).
    """
    classifier = encoder.model.eval()
    if path.backend == TORCH:
        return prepare_transformer(classifier, path)
    from sbert_core.inference.openvino_path import (
        OpenVINOTransformer,
        convert_transformer,
        probe_batch,
    )

    probe = probe_batch(classifier, encoder.tokenizer, token_types=encoder.takes_token_types)
    calibration = (
        padded_pair_batches(encoder, calibration_pairs(), batch_size=_CALIBRATION_BATCH)
        if path.name == INT8
        else None
    )
    compiled = convert_transformer(
        classifier, path.name, torch.get_num_threads(), calibration, probe, output="logits"
    )
    return OpenVINOTransformer(classifier, compiled, output="logits")
