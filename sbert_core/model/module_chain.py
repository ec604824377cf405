"""Reading a sentence-transformers ``modules.json`` into the chain this encoder runs.

The chain is Transformer -> Pooling -> any of Dense, LayerNorm, Normalize and Dropout, in the
order listed. A module is recognised by the last part of its ``type`` (``Dense`` in
``sentence_transformers.models.Dense`` or ``sentence_transformers.base.modules.dense.Dense``),
and only within sentence-transformers' own package: code named by a model folder is never
imported. Everything else is refused with its type named, Router/Asym (separate query and
document paths) with a message of its own.

The Transformer's ``sentence_bert_config.json`` is checked too: settings under which
sentence-transformers would compute something else than this encoder (a chat-template message
format, another task head, query expansion, processor overrides) are refused, naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sbert_core.errors import ModelLoadError
from sbert_core.model.head_modules import HEAD_KINDS, HeadKind
from sbert_core.model.json_files import read_json

_ROUTERS = ("Router", "Asym")
# sentence_bert_config.json: the file names older sentence-transformers versions used as well.
TRANSFORMER_CONFIG_FILES = (
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
)
# The values under which sentence-transformers feeds text to the model's forward and pools its
# last hidden states, which is all this encoder does.
_PLAIN_TEXT_MODALITY = {"text": {"method": "forward", "method_output_name": "last_hidden_state"}}
_FIXED_SETTINGS = {
    "transformer_task": "feature-extraction",
    "modality_config": _PLAIN_TEXT_MODALITY,
    "module_output_name": "token_embeddings",
}
# Settings that change nothing this encoder computes (loader hints), per argument group.
_HARMLESS_KWARGS = {
    "model": {"trust_remote_code", "attn_implementation", "torch_dtype", "dtype"},
    "tokenizer": {"trust_remote_code", "padding_side"},
    "config": {"trust_remote_code"},
}
_KWARG_GROUPS = {
    "model_args": "model",
    "model_kwargs": "model",
    "tokenizer_args": "tokenizer",
    "processor_kwargs": "tokenizer",
    "config_args": "config",
    "config_kwargs": "config",
}
_UNUSED_WHEN_NULL = ("query_length", "document_length", "query_expansion")


@dataclass(frozen=True)
class HeadEntry:
    """One module after Pooling: its kind and folder."""

    kind: HeadKind
    path: Path


@dataclass(frozen=True)
class TransformerSettings:
    """What the Transformer module's ``sentence_bert_config.json`` says that we use."""

    max_seq_length: int | None = None
    do_lower_case: bool = False
    padding_side: str | None = None  # a tokenizer override, else the tokenizer's own


@dataclass(frozen=True)
class ModuleChain:
    """The folders of a sentence-transformers model's modules, in order.

    Attributes:
        transformer_dir: the Transformer module's folder (config, weights, tokenizer).
        pooling_dir: the Pooling module's folder.
        heads: the modules after Pooling, in order.
        settings: the Transformer's sentence-transformers settings.
    """

    transformer_dir: Path
    pooling_dir: Path
    heads: tuple[HeadEntry, ...]
    settings: TransformerSettings


def read_module_chain(root: Path, inside) -> ModuleChain:
    """Read ``root/modules.json``.

    Args:
        root: the model folder.
        inside: ``inside(root, relative, named_in) -> Path``, which refuses paths leaving the
            folder (:func:`sbert_core.model.artifact.inside_model_dir`).

    Raises:
        ModelLoadError: unreadable JSON, an unsupported module type (named), or a chain that is
            not Transformer -> Pooling -> head modules.
    """
    modules_file = root / "modules.json"
    modules = read_json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ModelLoadError(f"{modules_file}: expected a list of module objects")
    roles: list[tuple[str, Path]] = []
    for entry in sorted(modules, key=lambda m: m.get("idx", 0)):
        module_type = str(entry.get("type", ""))
        name = module_type.rsplit(".", 1)[-1]
        ours = module_type.startswith("sentence_transformers.")
        if ours and name in _ROUTERS:
            raise ModelLoadError(
                f"{modules_file}: module type {module_type!r} routes queries and documents "
                "through separate modules; such models are not supported (use a model with one "
                "path for every input)"
            )
        if not ours or name not in ("Transformer", "Pooling", *HEAD_KINDS):
            raise ModelLoadError(
                f"{modules_file}: module type {module_type!r} is not supported (supported: "
                f"Transformer, Pooling, {', '.join(HEAD_KINDS)}); code named by a model folder "
                "is never imported"
            )
        roles.append((name, inside(root, str(entry.get("path", "")), modules_file)))
    names = [name for name, _ in roles]
    if names[:2] != ["Transformer", "Pooling"] or {"Transformer", "Pooling"} & set(names[2:]):
        raise ModelLoadError(
            f"{modules_file}: the modules are {' -> '.join(names) or 'none'}; supported chains "
            "are Transformer -> Pooling -> any of " + ", ".join(HEAD_KINDS)
        )
    transformer_dir = roles[0][1]
    return ModuleChain(
        transformer_dir=transformer_dir,
        pooling_dir=roles[1][1],
        heads=tuple(HeadEntry(HEAD_KINDS[name], path) for name, path in roles[2:]),
        settings=read_transformer_settings(transformer_dir),
    )


def read_transformer_settings(transformer_dir: Path) -> TransformerSettings:
    """Read and check the Transformer module's ``sentence_bert_config.json`` (if any).

    Raises:
        ModelLoadError: a setting under which sentence-transformers would compute something this
            encoder does not, naming the file and key.
    """
    path = next(
        (transformer_dir / n for n in TRANSFORMER_CONFIG_FILES if (transformer_dir / n).is_file()),
        None,
    )
    if path is None:
        return TransformerSettings()
    config = read_json(path)
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path}: expected a JSON object")
    for key, expected in _FIXED_SETTINGS.items():
        if key in config and config[key] != expected:
            raise ModelLoadError(
                f"{path}: {key} {config[key]!r} is not supported (only {expected!r}: text fed to "
                "the model's forward, its last hidden states pooled)"
            )
    for key in _UNUSED_WHEN_NULL:
        if config.get(key) is not None:
            raise ModelLoadError(f"{path}: {key} {config[key]!r} is not supported")
    if config.get("processing_kwargs"):
        raise ModelLoadError(
            f"{path}: processing_kwargs {config['processing_kwargs']!r} are not supported"
        )
    padding_side = None
    for key, group in _KWARG_GROUPS.items():
        values = config.get(key) or {}
        if not isinstance(values, dict):
            raise ModelLoadError(f"{path}: {key} must be an object")
        unknown = sorted(set(values) - _HARMLESS_KWARGS[group])
        if unknown:
            raise ModelLoadError(
                f"{path}: {key} {unknown[0]!r} is not supported (it changes how "
                "sentence-transformers loads or runs the model)"
            )
        if values.get("trust_remote_code"):
            raise ModelLoadError(f"{path}: {key} asks for trust_remote_code, which is refused")
        if group == "tokenizer" and "padding_side" in values:
            padding_side = values["padding_side"]
            if padding_side not in ("left", "right"):
                raise ModelLoadError(f"{path}: padding_side must be 'left' or 'right'")
    max_seq_length = config.get("max_seq_length")
    if max_seq_length is not None and (
        isinstance(max_seq_length, bool)
        or not isinstance(max_seq_length, int)
        or max_seq_length < 1
    ):
        raise ModelLoadError(f"{path}: max_seq_length must be a positive integer or null")
    return TransformerSettings(
        max_seq_length=max_seq_length,
        do_lower_case=bool(config.get("do_lower_case", False)),
        padding_side=padding_side,
    )
