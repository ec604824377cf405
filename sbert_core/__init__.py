"""The SBERT core: loading, encoding, pooling, evaluation and saving of Sentence-BERT models.

This package never imports ``apache_beam``; pipelines wrap it. Its public names load on first
use (PEP 562), so importing a light submodule (``sbert_core.errors``, ``sbert_core.tabular``)
or ``sbert --help`` does not pull in torch.

Layout: the shared leaves ``errors``, ``version``, ``config`` (typed configs from YAML and
overrides) and ``tabular`` (small labelled tables) at the top, and four subpackages, each
importing only the ones before it and the leaves (but training and evaluation, which use each
other): ``model`` (the model format), ``inference`` (the encoder and its compute paths),
``training`` (fine-tuning) and ``evaluation`` (evaluators and metrics).

Example:
    >>> from sbert_core import SentenceEncoder  # imports torch and the encoder here
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sbert_core.version import __version__

# Public name -> the submodule that defines it.
_EXPORTS = {
    "CrossEncoder": "sbert_core.inference.cross_encoder",
    "DEFAULT_MODEL": "sbert_core.model.source",
    "DataFileError": "sbert_core.errors",
    "EncodeResult": "sbert_core.inference.encode_result",
    "ModelInfo": "sbert_core.model.info",
    "ModelLoadError": "sbert_core.errors",
    "SentenceEncoder": "sbert_core.inference.encoder",
    "inspect_model": "sbert_core.model.info",
}

__all__ = [
    "DEFAULT_MODEL",
    "CrossEncoder",
    "DataFileError",
    "EncodeResult",
    "ModelInfo",
    "ModelLoadError",
    "SentenceEncoder",
    "__version__",
    "inspect_model",
]

if TYPE_CHECKING:
    from sbert_core.errors import DataFileError, ModelLoadError
    from sbert_core.inference.cross_encoder import CrossEncoder
    from sbert_core.inference.encode_result import EncodeResult
    from sbert_core.inference.encoder import SentenceEncoder
    from sbert_core.model.info import ModelInfo, inspect_model
    from sbert_core.model.source import DEFAULT_MODEL


def __getattr__(name: str) -> Any:
    """Import the submodule behind a public name the first time the name is used."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sbert_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
