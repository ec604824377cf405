"""Reading the JSON files of a model folder, with one error for every way that fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sbert_core.errors import ModelLoadError


def read_json(path: Path) -> Any:
    """The parsed content of ``path``.

    Raises:
        ModelLoadError: the file is missing, unreadable, not UTF-8 or not JSON (names the file).
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"{path}: unreadable JSON ({err})") from err


def read_json_object(path: Path) -> dict:
    """The JSON object (dict) in ``path``.

    Raises:
        ModelLoadError: as :func:`read_json`, or the file holds something other than an object.
    """
    content = read_json(path)
    if not isinstance(content, dict):
        raise ModelLoadError(f"{path}: expected a JSON object")
    return content
