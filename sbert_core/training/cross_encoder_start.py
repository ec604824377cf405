"""The cross-encoder a fine-tuning run starts from.

Two kinds of folder start one:

* a cross-encoder (a sentence-transformers CrossEncoder folder, or a Hugging Face
  sequence-classification folder): loaded with :meth:`CrossEncoder.load` and trained further;
* any encoder (a sentence-transformers bi-encoder such as the bundled all-MiniLM-L6-v2, or a
  plain Hugging Face encoder): its transformer under a NEW one-label classification head
  (``AutoModelForSequenceClassification.from_pretrained(transformer_dir, num_labels=1)``, as
  sentence-transformers' ``CrossEncoder(encoder_name, num_labels=1)`` builds it), with Sigmoid
  as the activation the trained model is saved with.

Both go through the loading refusals of the bi-encoder and the cross-encoder: no pickle weights
without ``allow_pickle``, no remote code, the config checked against the weights, every tensor of
the encoder present and finite (only the new head, and a pooler the encoder lacks, start at
random).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch
from torch import nn

from sbert_core.errors import ModelLoadError
from sbert_core.inference.cross_encoder import CrossEncoder
from sbert_core.model.artifact import read_layout, sha256_of_files, weight_files
from sbert_core.model.cross_encoder_folder import (
    MODEL_TYPE,
    ST_CONFIG_FILE,
    load_classifier,
    max_length_of,
    read_config_and_tokenizer,
)
from sbert_core.model.json_files import read_json_object
from sbert_core.model.source import resolve_model_dir

logger = logging.getLogger(__name__)


def is_cross_encoder_folder(directory: os.PathLike) -> bool:
    """Whether ``directory`` holds a cross-encoder (to continue training) rather than an
    encoder (to put a new head on): a sentence-transformers folder whose
    ``config_sentence_transformers.json`` says ``model_type: CrossEncoder``, or a plain folder
    whose ``config.json`` names a ``...ForSequenceClassification`` architecture."""
    directory = Path(directory)
    if (directory / "modules.json").is_file():
        settings = directory / ST_CONFIG_FILE
        return settings.is_file() and read_json_object(settings).get("model_type") == MODEL_TYPE
    config = directory / "config.json"
    if not config.is_file():
        return False
    architectures = read_json_object(config).get("architectures") or []
    return any(str(name).endswith("ForSequenceClassification") for name in architectures)


def start_cross_encoder(
    model: str | os.PathLike,
    *,
    allow_pickle: bool = False,
    max_length: int | None = None,
    device: str | torch.device | None = None,
) -> CrossEncoder:
    """The cross-encoder to train: ``model`` itself if it is one, else a new head on it.

    Seed the generators first (:func:`~sbert_core.training.checkpoint.seed_everything`): the
    new head is drawn from them.

    Args:
        model: a folder, or the bundled default's name (``all-MiniLM-L6-v2``).
        allow_pickle: accept ``pytorch_model.bin`` weights (they can run code when read).
        max_length: truncate pairs to this many tokens (special tokens included); default the
            folder's sentence-transformers ``max_seq_length``, else the tokenizer's limit.
        device: where the weights go; default CUDA when available.

    Raises:
        ModelLoadError: missing, corrupt or foreign files, pickle weights without
            ``allow_pickle``, encoder weights that do not match the config.
        ValueError: a ``max_length`` outside the model's positions.
    """
    directory, model_id = resolve_model_dir(model)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if is_cross_encoder_folder(directory):
        logger.info("continuing to train the cross-encoder %s", model_id)
        return CrossEncoder.load(
            directory, device=device, allow_pickle=allow_pickle, max_length=max_length
        )
    return _new_head(directory, model_id, allow_pickle, max_length).to(device)


def _new_head(directory, model_id: str, allow_pickle: bool, max_length: int | None):
    """The encoder in ``directory`` under a new one-label classification head."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    layout = read_layout(directory)
    source = layout.transformer_dir
    files = weight_files(source, allow_pickle=allow_pickle)
    # The refusals of loading a cross-encoder (no remote code, a plain folder's tokenizer, a
    # supported architecture), on the encoder's config, then one label for the new head.
    config, tokenizer = read_config_and_tokenizer(layout, directory)
    config.num_labels = 1
    # A bi-encoder saved no head: transformers warns that the head is newly initialised, which
    # is the point here, and the check below says what was drawn at random instead.
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        classifier, info = load_classifier(source, config, files, torch.float32)
    finally:
        hf_logging.set_verbosity(verbosity)
    _check_only_head_is_new(classifier, info, source)
    length = max_length_of(config, tokenizer, layout.max_seq_length, max_length)
    logger.info(
        "a new classification head on %s (%s), pairs truncated at %d tokens",
        model_id,
        type(classifier).__name__,
        length,
    )
    return CrossEncoder(
        classifier,
        tokenizer,
        activation=nn.Sigmoid(),
        max_length=length,
        do_lower_case=layout.do_lower_case,
        model_id=model_id,
        weights_sha256=sha256_of_files(files),
    )


def _check_only_head_is_new(classifier: nn.Module, info: dict, source) -> None:
    """Refuse an encoder whose own weights were missing or mismatched: only the head (and a
    pooler, which sentence embeddings never used) may start at random.

    Raises:
        ModelLoadError: naming the first encoder tensor that was not in the weights, or one
            that is not finite.
    """
    prefix = f"{classifier.base_model_prefix}."
    encoder_keys = [
        str(key)
        for key in (info.get("missing_keys") or ())
        if str(key).startswith(prefix) and not str(key).startswith(f"{prefix}pooler.")
    ]
    mismatched = [str(key) for key in (info.get("mismatched_keys") or ())]
    for kind, keys in (("missing", encoder_keys), ("mismatched", mismatched)):
        if keys:
            raise ModelLoadError(
                f"{source}: the encoder's weights do not match config.json ({kind}: first "
                f"{sorted(keys)[0]!r}, {len(keys)} in all)"
            )
    for name, parameter in classifier.named_parameters():
        if not bool(torch.isfinite(parameter.detach()).all()):
            raise ModelLoadError(f"{source}: tensor {name!r} has NaN or infinite values")
    new = sorted(str(key) for key in (info.get("missing_keys") or ()))
    if new:
        logger.info("%s: new (random) tensors: %s", source, ", ".join(new))
