"""The SBERT core: loading, encoding, pooling, evaluation and saving of Sentence-BERT models.

This package never imports ``apache_beam``; pipelines wrap it.
"""

from sbert_core.encoder import EncodeResult, ModelInfo, SentenceEncoder, inspect_model
from sbert_core.errors import DataFileError, ModelLoadError
from sbert_core.model_source import DEFAULT_MODEL

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "DataFileError",
    "EncodeResult",
    "ModelInfo",
    "ModelLoadError",
    "SentenceEncoder",
    "__version__",
    "inspect_model",
]
