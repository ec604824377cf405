"""Reading and writing sentence-transformers CrossEncoder folders, without loading weights.

Two layouts are read, as sentence-transformers 6 reads them:

* a folder saved by sentence-transformers 6: ``modules.json`` naming one Transformer module
  whose ``sentence_bert_config.json`` has ``transformer_task: sequence-classification``, and
  ``config_sentence_transformers.json`` with ``model_type: CrossEncoder`` and the activation
  function (``activation_fn``);
* a plain Hugging Face folder (what sentence-transformers 2-5 saved for a CrossEncoder): the
  activation function in ``config.json``'s ``sentence_transformers`` section (v4, v5) or its
  ``sbert_ce_default_activation_function`` (v2, v3).

The activation function is looked up in that order; without one it is Sigmoid for one label and
Identity otherwise. Like sentence-transformers without ``trust_remote_code``, only classes of
``torch`` are used: any other path is logged and replaced by the default. Unlike it, a ``torch``
path must name an ``nn.Module`` class (``torch.save`` is no activation function).

:func:`write_cross_encoder_files` writes the sentence-transformers 6 layout plus the v4/v5
``config.json`` section, so every version from 4 on reads the activation back.
"""

from __future__ import annotations

import importlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from sbert_core.errors import ModelLoadError
from sbert_core.model.architectures import transformer_class
from sbert_core.model.artifact import (
    ModelLayout,
    inside_model_dir,
    is_sentence_transformers_folder,
)
from sbert_core.model.info import read_config_and_tokenizer_files
from sbert_core.model.json_files import read_json, read_json_object
from sbert_core.model.module_chain import TRANSFORMER_CONFIG_FILES
from sbert_core.model.weight_checks import check_weight_files

logger = logging.getLogger(__name__)

ST_CONFIG_FILE = "config_sentence_transformers.json"
# Position limits above this are "no limit" sentinels (tokenizers use 1e30).
_NO_LIMIT = 1_000_000
MODEL_TYPE = "CrossEncoder"
TRANSFORMER_TYPE = "sentence_transformers.base.modules.transformer.Transformer"
# What sentence-transformers 6 writes for a sequence-classification Transformer module: text fed
# to the model's forward, its logits taken as the scores.
_TEXT_MODALITY = {"text": {"method": "forward", "method_output_name": "logits"}}
_FIXED_SETTINGS = {
    "transformer_task": "sequence-classification",
    "modality_config": _TEXT_MODALITY,
    "module_output_name": "scores",
}
# Keys of sentence_bert_config.json whose argument groups may only hold loader hints.
_KWARG_KEYS = (
    "model_args",
    "model_kwargs",
    "tokenizer_args",
    "processor_kwargs",
    "config_args",
    "config_kwargs",
)
_HARMLESS_KWARGS = {"trust_remote_code", "attn_implementation", "torch_dtype", "dtype"}


@dataclass(frozen=True)
class CrossEncoderLayout:
    """What a CrossEncoder folder says, besides the Hugging Face files.

    Attributes:
        root: the model folder.
        transformer_dir: the folder holding ``config.json``, weights and tokenizer.
        max_seq_length: ``sentence_bert_config.json``'s override of the tokenizer's length.
        do_lower_case: lower-case texts before tokenising.
        activation_path: the saved activation's dotted path, or None (the default by labels).
        is_sentence_transformer: True for the sentence-transformers 6 layout.
    """

    root: Path
    transformer_dir: Path
    max_seq_length: int | None
    do_lower_case: bool
    activation_path: str | None
    is_sentence_transformer: bool


def read_cross_encoder_layout(root: Path) -> CrossEncoderLayout:
    """Inspect a CrossEncoder folder without loading weights.

    Raises:
        ModelLoadError: a missing or unreadable file, a folder of another sentence-transformers
            model type, modules other than one Transformer, or settings under which
            sentence-transformers would compute something else (naming the file and key).
    """
    modules_file = root / "modules.json"
    if not is_sentence_transformers_folder(root):
        return CrossEncoderLayout(root, root, None, False, _config_activation(root), False)

    st_config = _read_st_config(root)
    transformer_dir = _single_transformer(root, modules_file)
    max_seq_length, do_lower_case = _transformer_settings(transformer_dir)
    activation = st_config.get("activation_fn")
    if activation is not None and not isinstance(activation, str):
        raise ModelLoadError(f"{root / ST_CONFIG_FILE}: activation_fn must be a string or null")
    if activation is None or not _trusted(activation):
        # sentence-transformers falls back to config.json when the saved path is not usable.
        activation = _config_activation(transformer_dir)
    return CrossEncoderLayout(
        root, transformer_dir, max_seq_length, do_lower_case, activation, True
    )


def _read_st_config(root: Path) -> dict:
    path = root / ST_CONFIG_FILE
    # sentence-transformers takes a folder without this file (or without model_type) for a
    # SentenceTransformer and would put a random classification head on it.
    st_config = read_json_object(path) if path.is_file() else {}
    model_type = st_config.get("model_type", "SentenceTransformer")
    if model_type != MODEL_TYPE:
        raise ModelLoadError(
            f"{root}: a sentence-transformers {model_type} folder, not a CrossEncoder "
            f"({ST_CONFIG_FILE} must say model_type {MODEL_TYPE!r}); loading it as one would "
            "score pairs with an untrained classification head"
        )
    if st_config.get("default_prompt_name"):
        raise ModelLoadError(
            f"{path}: default_prompt_name {st_config['default_prompt_name']!r} is not supported "
            "(prompts are not prepended to cross-encoder pairs here)"
        )
    return st_config


def _single_transformer(root: Path, modules_file: Path) -> Path:
    modules = read_json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelLoadError(f"{modules_file}: expected a list of module objects")
    types = [str(entry.get("type", "")) for entry in modules]
    if len(modules) != 1 or not (
        types[0].startswith("sentence_transformers.") and types[0].endswith(".Transformer")
    ):
        raise ModelLoadError(
            f"{modules_file}: the modules are {types}; supported CrossEncoder folders have one "
            "sentence-transformers Transformer module (a sequence-classification model); code "
            "named by a model folder is never imported"
        )
    return inside_model_dir(root, str(modules[0].get("path", "")), modules_file)


def _transformer_settings(transformer_dir: Path) -> tuple[int | None, bool]:
    """``(max_seq_length, do_lower_case)`` of the Transformer's ``sentence_bert_config.json``."""
    path = next(
        (transformer_dir / n for n in TRANSFORMER_CONFIG_FILES if (transformer_dir / n).is_file()),
        None,
    )
    if path is None:
        raise ModelLoadError(
            f"{transformer_dir}: no sentence_bert_config.json saying transformer_task "
            "'sequence-classification'"
        )
    config = read_json_object(path)
    if config.get("transformer_task") != _FIXED_SETTINGS["transformer_task"]:
        raise ModelLoadError(
            f"{path}: transformer_task {config.get('transformer_task')!r} is not supported for a "
            "CrossEncoder (only 'sequence-classification')"
        )
    for key, expected in _FIXED_SETTINGS.items():
        if key in config and config[key] != expected:
            raise ModelLoadError(
                f"{path}: {key} {config[key]!r} is not supported (only {expected!r}: text pairs "
                "fed to the model's forward, its logits taken as scores)"
            )
    for key in ("processing_kwargs", "query_length", "document_length", "query_expansion"):
        if config.get(key):
            raise ModelLoadError(f"{path}: {key} {config[key]!r} is not supported")
    for key in _KWARG_KEYS:
        values = config.get(key) or {}
        if not isinstance(values, dict):
            raise ModelLoadError(f"{path}: {key} must be an object")
        if values.get("trust_remote_code"):
            raise ModelLoadError(f"{path}: {key} asks for trust_remote_code, which is refused")
        unknown = sorted(set(values) - _HARMLESS_KWARGS)
        if unknown:
            raise ModelLoadError(
                f"{path}: {key} {unknown[0]!r} is not supported (it changes how "
                "sentence-transformers loads or runs the model)"
            )
    max_seq_length = config.get("max_seq_length")
    valid = isinstance(max_seq_length, int) and not isinstance(max_seq_length, bool)
    if max_seq_length is not None and not (valid and max_seq_length >= 1):
        raise ModelLoadError(f"{path}: max_seq_length must be a positive integer or null")
    return max_seq_length, bool(config.get("do_lower_case", False))


def _config_activation(transformer_dir: Path) -> str | None:
    """The activation path ``config.json`` names (v4/v5 section, then the v2/v3 key)."""
    config = read_json_object(transformer_dir / "config.json")
    section = config.get("sentence_transformers")
    if isinstance(section, dict) and "activation_fn" in section:
        path = section["activation_fn"]
    else:
        path = config.get("sbert_ce_default_activation_function")
    if path is not None and not isinstance(path, str):
        raise ModelLoadError(f"{transformer_dir / 'config.json'}: activation_fn must be a string")
    return path if path is None or _trusted(path) else None


def _trusted(path: str) -> bool:
    # sentence-transformers imports only torch paths without trust_remote_code, which is never
    # given here; it logs the rest and uses its default.
    if path.startswith("torch."):
        return True
    logger.warning(
        "activation function %r is not a torch class and is not imported; using the default "
        "(Sigmoid for one label, Identity otherwise), as sentence-transformers does without "
        "trust_remote_code",
        path,
    )
    return False


def resolve_activation(path: str | None, num_labels: int, source: Path) -> nn.Module:
    """The activation module for a saved dotted path (None: the default by label count).

    Raises:
        ModelLoadError: a ``torch`` path that does not name an ``nn.Module`` class.
    """
    if path is None:
        return nn.Sigmoid() if num_labels == 1 else nn.Identity()
    module_name, _, class_name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ModelLoadError(f"{source}: activation function {path!r} not found ({err})") from err
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ModelLoadError(f"{source}: activation function {path!r} is not a torch module class")
    try:
        return cls()
    except TypeError as err:
        raise ModelLoadError(
            f"{source}: activation function {path!r} cannot be built without arguments ({err})"
        ) from err


def activation_path(activation: nn.Module) -> str:
    """The dotted path sentence-transformers saves for an activation module."""
    cls = type(activation)
    return f"{cls.__module__}.{cls.__qualname__}"


def write_cross_encoder_files(
    out: Path, *, activation: str, do_lower_case: bool, versions: dict[str, str]
) -> None:
    """Write the sentence-transformers files of a CrossEncoder folder into ``out``, which
    already holds the Hugging Face ``config.json``, weights and tokenizer.

    ``config.json`` gets the ``sentence_transformers`` section sentence-transformers 4 and 5
    read; ``modules.json``, ``sentence_bert_config.json`` and ``config_sentence_transformers.json``
    are what sentence-transformers 6 writes.
    """
    config_file = out / "config.json"
    config = read_json_object(config_file)
    config["sentence_transformers"] = {"activation_fn": activation}
    _write_json(config_file, config)
    _write_json(
        out / "modules.json",
        [{"idx": 0, "name": "0", "path": "", "type": TRANSFORMER_TYPE}],
    )
    settings = {**_FIXED_SETTINGS, **({"do_lower_case": True} if do_lower_case else {})}
    _write_json(out / "sentence_bert_config.json", settings)
    _write_json(
        out / ST_CONFIG_FILE,
        {
            "__version__": versions,
            "activation_fn": activation,
            "default_prompt_name": None,
            "model_type": MODEL_TYPE,
            "prompts": {},
        },
    )


def read_config_and_tokenizer(layout: CrossEncoderLayout | ModelLayout, directory: Path) -> tuple:
    """The Hugging Face config and fast tokenizer of a CrossEncoder folder, or of the encoder
    a new cross-encoder starts from (no remote code), read and checked as the bi-encoder's are
    (:func:`~sbert_core.model.info.read_config_and_tokenizer_files`: a plain folder's tokenizer
    has no chat template), and the architecture a supported sequence classifier
    (:func:`check_architecture`).

    Returns:
        ``(config, tokenizer)``.

    Raises:
        ModelLoadError: an unreadable config or tokenizer (one line naming the folder), a chat
            template in a plain folder, or an unsupported architecture.
    """
    source = layout.transformer_dir
    config, tokenizer = read_config_and_tokenizer_files(
        source, directory, plain_folder=not layout.is_sentence_transformer
    )
    check_architecture(config, source / "config.json")
    return config, tokenizer


def load_classifier(
    source: Path, config, files: list[Path], dtype: torch.dtype
) -> tuple[nn.Module, dict]:
    """The sequence classifier in ``source`` (no remote code), built from ``config``, after its
    weight files are checked against it (:func:`check_weight_files`: shapes from the headers,
    no NaN/inf, pickle only where allowed).

    Args:
        source: the folder with ``config.json`` and the weights.
        config: the (checked) Hugging Face config to build from.
        files: the weight files, from :func:`~sbert_core.model.artifact.weight_files`.
        dtype: the dtype the weights are loaded in.

    Returns:
        ``(classifier, loading_info)``: the model and from_pretrained's missing/unexpected keys,
        for the caller to judge (a new head is expected to be missing, a trained one not).

    Raises:
        ModelLoadError: weights that do not fit the config, or that transformers cannot load.
    """
    from transformers import AutoModelForSequenceClassification

    uses_pickle = check_weight_files(config, files, source)
    try:
        return AutoModelForSequenceClassification.from_pretrained(
            source,
            config=config,
            dtype=dtype,
            use_safetensors=not uses_pickle,
            trust_remote_code=False,
            output_loading_info=True,
        )
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelLoadError(f"{source}: could not load the weights ({err})") from err


def check_architecture(config, source: Path) -> None:
    """Refuse what sentence-transformers would not run as a sequence classifier.

    Raises:
        ModelLoadError: a causal language model, a T5-family or other encoder-decoder model.
    """
    transformer_class(config, source)  # encoder-decoders other than T5's encoder
    architectures = getattr(config, "architectures", None) or []
    if architectures and str(architectures[0]).endswith("ForCausalLM"):
        raise ModelLoadError(
            f"{source}: {architectures[0]} is a causal language model; sentence-transformers "
            "scores pairs with it through yes/no token logits (LogitScore), which is not "
            "supported here (use a sequence-classification model)"
        )
    if str(getattr(config, "model_type", "")) in ("t5", "mt5", "umt5"):
        raise ModelLoadError(f"{source}: T5-family cross-encoders are not supported")


def max_length_of(config, tokenizer, saved: int | None, requested: int | None) -> int:
    """The truncation length of a pair, as sentence-transformers 6 sets the tokenizer's
    ``model_max_length``: a saved ``max_seq_length`` as is, else the tokenizer's capped at
    ``max_position_embeddings``; a requested one must fit the positions.

    Raises:
        ValueError: a requested length outside ``[1, position limit]``.
    """
    positions = getattr(config, "max_position_embeddings", None)
    positions = positions if isinstance(positions, int) and 0 < positions < _NO_LIMIT else None
    limit = positions
    # RoBERTa-style models reserve two positions for the padding offset.
    if limit and getattr(config, "model_type", "") in {"roberta", "xlm-roberta", "camembert"}:
        limit -= 2
    if requested is not None:
        if not 1 <= requested <= (limit or _NO_LIMIT):
            raise ValueError(f"max_length must be in [1, {limit}], got {requested}")
        return int(requested)
    if saved is not None:
        return int(min(saved, limit) if limit else saved)
    own = tokenizer.model_max_length
    own = own if isinstance(own, int) and 0 < own < _NO_LIMIT else None
    candidates = [value for value in (own, positions) if value]
    return int(min(candidates)) if candidates else 512


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
