"""The header of a safetensors file, read without loading a tensor: what every check of a model's
weights starts from (the artifact's file list, the head modules' weights, the config bounds).

A module of its own, depending on nothing else of sbert_core but its errors, so that the model
format's modules can all use it without importing one another.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from sbert_core.errors import ModelLoadError


def check_safetensors(path: Path) -> None:
    """Raise ``ModelLoadError`` naming ``path`` unless it is a complete safetensors file."""
    safetensors_header(path)


def safetensors_header(path: Path) -> dict:
    """The JSON header of a complete safetensors file (tensor names, dtypes, shapes, offsets).

    Raises:
        ModelLoadError: naming ``path`` when it is missing, truncated or not safetensors.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ValueError("file shorter than the 8-byte header length")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > size - 8:
                raise ValueError("header runs past the end of the file")
            header = json.loads(handle.read(header_len))
    except FileNotFoundError as err:
        raise ModelLoadError(f"{path}: weights file is missing") from err
    except (OSError, ValueError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"{path}: corrupt safetensors file ({err})") from err
    if not isinstance(header, dict):
        raise ModelLoadError(f"{path}: corrupt safetensors file (the header is not an object)")
    try:
        data_end = max(
            (int(info["data_offsets"][1]) for key, info in header.items() if key != "__metadata__"),
            default=0,
        )
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise ModelLoadError(f"{path}: corrupt safetensors file (bad tensor entry: {err})") from err
    if 8 + header_len + data_end != size:
        raise ModelLoadError(
            f"{path}: corrupt safetensors file (tensors need {8 + header_len + data_end} bytes, "
            f"file has {size}; truncated download?)"
        )
    return header
