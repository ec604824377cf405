"""Saving an encoder as a sentence-transformers directory plus our ``sbert_manifest.json``.

The layout is the one every sentence-transformers version reads: ``modules.json`` with the
classic module type names, ``sentence_bert_config.json``, ``1_Pooling/config.json`` (boolean
pooling keys and ``include_prompt``), one folder per module after pooling (``2_Dense/``,
``3_Normalize/``, ... with their configs and safetensors weights), the model's prompts in
``config_sentence_transformers.json``, and the transformer's config, safetensors weights and
tokenizer files (padding side included) at the top level. The directory is built next to its
destination and renamed into place, so it appears whole or not at all.
"""

from __future__ import annotations

import contextlib
import json
import platform
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from sbert_core.model.artifact import MANIFEST_FILE, SAFETENSORS_FILE, sha256_of_files
from sbert_core.model.head_modules import MODULE_TYPES, WEIGHTS_FILE, kind_of, save_head_module
from sbert_core.model.pooling import PoolingConfig
from sbert_core.model.prompts import PromptSettings


class ExportableEncoder(Protocol):
    """What saving reads of an encoder (:class:`sbert_core.inference.encoder.SentenceEncoder` has it
    all; named here so that this module does not import the encoder, which imports it to save)."""

    transformer: nn.Module
    tokenizer: Any
    pooling: PoolingConfig
    heads: Iterable[nn.Module]
    prompts: PromptSettings
    max_seq_length: int
    do_lower_case: bool
    model_id: str
    weights_sha256: str | None

    @property
    def dtype(self) -> torch.dtype: ...

    def describe(self) -> dict: ...


def save_encoder(
    encoder: ExportableEncoder,
    path: Path,
    *,
    overwrite: bool = False,
    extra_manifest: dict | None = None,
) -> Path:
    """Write ``encoder`` to ``path`` and return it.

    Weights are saved in float32 whatever the encoder's compute dtype, so the artifact is the
    same model on every machine. The manifest's ``weights_sha256`` covers the transformer's
    weights and then those of the modules after pooling, in chain order (the identity
    :func:`sbert_core.model.info.inspect_model` computes for the saved folder).

    Raises:
        FileExistsError: ``path`` exists and is not empty, and ``overwrite`` is False.
    """
    from sbert_core.version import __version__

    path = Path(path)
    with staged_model_folder(path, overwrite=overwrite) as staging:
        head_weights = _write_model(encoder, staging)
        manifest = {
            **encoder.describe(),
            "dtype": "float32",
            "weights_sha256": sha256_of_files([staging / SAFETENSORS_FILE, *head_weights]),
            "source": {"model_id": encoder.model_id, "weights_sha256": encoder.weights_sha256},
            "software": {
                "sbert_pipeline": __version__,
                "torch": torch.__version__,
                "python": platform.python_version(),
            },
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **(extra_manifest or {}),
        }
        _write_json(staging / MANIFEST_FILE, manifest)
    return path


@contextlib.contextmanager
def staged_model_folder(path: Path, *, overwrite: bool) -> Iterator[Path]:
    """A new folder beside ``path`` to write a model into; it replaces ``path`` when the block
    ends, and is removed if the block raises (``path`` is then as it was).

    Raises:
        FileExistsError: ``path`` exists and is not empty, and ``overwrite`` is False.
    """
    if path.exists() and any(path.iterdir()) and not overwrite:
        raise FileExistsError(f"{path} exists and is not empty; pass overwrite=True to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield staging
        if path.exists():
            shutil.rmtree(path)
        staging.rename(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _write_model(encoder: ExportableEncoder, out: Path) -> list[Path]:
    """Write the model files; returns the weight files of the modules after pooling, in order."""
    import transformers

    from sbert_core.version import __version__

    transformer = encoder.transformer
    original_dtype = encoder.dtype
    # Buffers kept in float32 while the weights run in bf16 (rotary frequencies) stay so.
    float32_buffers = [n for n, b in transformer.named_buffers() if b.dtype == torch.float32]
    try:
        transformer.to(torch.float32)
        transformer.save_pretrained(out, safe_serialization=True)
    finally:
        transformer.to(original_dtype)
        for name in float32_buffers:
            owner, _, attribute = name.rpartition(".")
            module = transformer.get_submodule(owner)
            module._buffers[attribute] = module._buffers[attribute].float()
    tokenizer = encoder.tokenizer
    tokenizer.model_max_length = encoder.max_seq_length
    tokenizer.save_pretrained(out)

    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {
            "idx": 1,
            "name": "1",
            "path": "1_Pooling",
            "type": "sentence_transformers.models.Pooling",
        },
    ]
    (out / "1_Pooling").mkdir()
    _write_json(out / "1_Pooling" / "config.json", encoder.pooling.to_dict())
    head_weights = []
    for idx, module in enumerate(encoder.heads, start=2):
        module_type = MODULE_TYPES[kind_of(module)]
        folder = f"{idx}_{module_type.rsplit('.', 1)[-1]}"
        modules.append({"idx": idx, "name": str(idx), "path": folder, "type": module_type})
        save_head_module(module, out / folder)
        if (out / folder / WEIGHTS_FILE).is_file():
            head_weights.append(out / folder / WEIGHTS_FILE)
    _write_json(out / "modules.json", modules)
    _write_json(
        out / "sentence_bert_config.json",
        {"max_seq_length": encoder.max_seq_length, "do_lower_case": encoder.do_lower_case},
    )
    _write_json(
        out / "config_sentence_transformers.json",
        {
            "__version__": {
                "sbert_pipeline": __version__,
                "transformers": transformers.__version__,
                "pytorch": torch.__version__,
            },
            **encoder.prompts.to_dict(),
            "similarity_fn_name": "cosine",
        },
    )
    return head_weights


def _write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
