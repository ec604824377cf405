"""What a stage of ``sbert run`` reads from outside the job, described by content.

A stage's :attr:`~sbert_pipeline.stage_api.job_stage.JobStage.external_inputs` describes the
files its options name outside the job (the corpus, a model, a config and its data) with these
helpers, so that a change of their content reruns it: a file is its path, size and xxh3_128 of
its bytes as stored, hashed on every run (a size and time that did not change prove nothing: an
edit can keep both), never its modification time. A model is its identity (id, weights sha256,
dim), as the embed manifest records it, or its folder file by file.

Imports no Beam itself: local paths go through ``sbert_pipeline.io.filesystems``, which loads
Beam only for a path with a scheme.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sbert_pipeline.io.content_checks import file_digests


def described_files(files: Iterable[tuple[str, int]]) -> list[dict]:
    """``(path, size)`` files as fingerprints record them (``path``, ``size``, ``digest``),
    sorted by path; every file is read."""
    found = sorted(files)
    digests = file_digests(found)
    return [
        {"path": path, "size": size, "digest": digest}
        for (path, size), digest in zip(found, digests, strict=True)
    ]


def local_files(paths: Iterable[Path]) -> list[dict]:
    """Local files as fingerprints record them, sorted by path."""
    return described_files((str(path), path.stat().st_size) for path in paths)


def matched_files(paths: list[str]) -> list[dict]:
    """The files ``paths`` match on any filesystem, as fingerprints record them."""
    from sbert_pipeline.io.filesystems import FileSystems

    found = [m for result in FileSystems.match(paths) for m in result.metadata_list]
    return described_files((m.path, int(m.size_in_bytes)) for m in found)


def corpus_files(pattern: str, key: str) -> list[dict]:
    """The files ``pattern`` matches, as the embed stage matches them (a local file or folder
    named with glob characters as written; a file name that is not UTF-8 refused).

    Raises:
        FileNotFoundError: nothing matches (naming the config ``key``).
    """
    from sbert_pipeline.io.corpus_files import refuse_unrecordable_names
    from sbert_pipeline.io.filesystems import FileSystems

    matched = FileSystems.match([pattern])[0].metadata_list
    if not matched:
        raise FileNotFoundError(f"{key}: no files match {pattern}")
    refuse_unrecordable_names(m.path for m in matched)
    return described_files((m.path, int(m.size_in_bytes)) for m in matched)


def model_identity(options: Any) -> dict:
    """The identity (id, weights sha256, dim, pooling) of the model of ``options`` (any options
    with the model options), as the embed manifest records it.

    Raises:
        ModelLoadError, ValueError: the model cannot be found or read (``model: ...``).
    """
    from sbert_pipeline.stage_api.model_options import encoder_settings

    from sbert_core.errors import ModelLoadError

    # task: a corpus is embedded as documents, as sbert embed does.
    settings = encoder_settings(options, task="document")
    try:
        info = settings.inspect()
    except ModelLoadError as err:
        # The config's key instead of the command line's flag.
        raise ModelLoadError(f"model: {str(err).removeprefix('--model ')}") from None
    except ValueError as err:
        raise ValueError(f"model: {err}") from None
    return settings.describe(info)


def model_files(model: str, key: str) -> dict:
    """A model folder described by its files (path relative to it, size, digest), so that a
    model retrained into the same folder is a change; a name that is no local folder (a Hub id)
    by the name alone.

    Raises:
        FileNotFoundError: ``model`` is a path (absolute, or starting with ``.`` or ``~``) to
            no folder (naming the config ``key``).
    """
    folder = Path(model)
    if not folder.is_dir():
        if folder.is_absolute() or model.startswith((".", "~")):  # a path, not a Hub id
            raise FileNotFoundError(f"{key}: {model} is not a folder")
        return {"name": model}
    files = local_files([path for path in folder.rglob("*") if path.is_file()])
    for entry in files:
        entry["path"] = str(Path(entry["path"]).relative_to(folder))
    return {"name": model, "files": files}


def named_paths(key: str, names: Iterable[str]) -> list[tuple[str, str]]:
    """``(key, name)`` for the names that are paths (a URL, or a local file or folder that
    exists); a model's Hub name is none."""
    return [(key, name) for name in names if "://" in name or os.path.lexists(name)]
