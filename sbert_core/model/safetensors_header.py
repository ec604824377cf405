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
        raise ModelLoadError(_corrupt(path, str(err))) from err
    if not isinstance(header, dict):
        raise ModelLoadError(_corrupt(path, "the header is not an object"))
    try:
        data_end = max(
            (int(info["data_offsets"][1]) for key, info in header.items() if key != "__metadata__"),
            default=0,
        )
    except (KeyError, IndexError, TypeError, ValueError) as err:
        raise ModelLoadError(_corrupt(path, f"bad tensor entry: {err}")) from err
    if 8 + header_len + data_end != size:
        raise ModelLoadError(
            _corrupt(path, f"tensors need {8 + header_len + data_end} bytes, file has {size}")
        )
    return header


def _corrupt(path: Path, detail: str) -> str:
    """The one line that names a damaged weights file and what to do about it."""
    return (
        f"{path}: corrupt safetensors file ({detail}), truncated or damaged: copy or download "
        "the model again"
    )
