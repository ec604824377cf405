"""The models this process has loaded, kept for the next pipeline step that asks for the same.

Beam keeps a ``RunInference`` model for as long as its DoFn lives. On the local runner and
Dataflow that is the whole stage, but Beam's Dask runner sets a DoFn up and tears it down for
every partition, so each partition would load the model again, and each stage of a job again.
:func:`cached_model` keeps the last :data:`MAX_MODELS` models per process, keyed by what
changes the loaded model: the settings (a frozen dataclass: model, device, dtype, threads,
backend ...) and, for a model directory, its files' names, sizes and modification times (a
model rewritten in place, such as a job's fine-tuned ``model/``, is loaded again).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

ModelT = TypeVar("ModelT")

# Two: a job that embeds with one model and verifies with another keeps both, and a third
# model pushes out the one used longest ago.
MAX_MODELS = 2

_lock = threading.Lock()
_models: OrderedDict[Hashable, Any] = OrderedDict()


def model_key(settings: Hashable, model: str) -> tuple:
    """What identifies a loaded model: the settings and, when ``model`` is a local directory
    (or file), the name, size and modification time of each of its files."""
    return settings, _files_signature(model)


def cached_model(settings: Hashable, model: str, load: Callable[[], ModelT]) -> ModelT:
    """The model loaded by ``load`` for ``settings`` (whose model is ``model``), loaded once
    per process while it stays among the :data:`MAX_MODELS` used last.

    Loading holds a lock, so threads of one worker that ask at once load it once.
    """
    key = model_key(settings, model)
    with _lock:
        if key in _models:
            _models.move_to_end(key)
            return _models[key]
        loaded = load()
        _models[key] = loaded
        while len(_models) > MAX_MODELS:
            _models.popitem(last=False)
        return loaded


def clear_models() -> None:
    """Forget every kept model (its memory is freed once nothing else holds it)."""
    with _lock:
        _models.clear()


def _files_signature(model: str) -> tuple:
    path = model.removeprefix("file://")
    if os.path.isfile(path):
        stat = os.stat(path)
        return ((os.path.basename(path), stat.st_size, stat.st_mtime_ns),)
    if not os.path.isdir(path):
        return ()  # a bundled name or a Hub id: the settings say it all
    entries = []
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            try:
                stat = os.stat(full)
            except OSError:  # a file removed meanwhile: the load itself will say
                continue
            entries.append((os.path.relpath(full, path), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(entries))
