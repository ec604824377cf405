"""Where a job's folders lie against its inputs: apart, always.

Every folder the job writes (one per stage) and its own files (``job.yaml``, the state, the
report) are in ``job_dir``, so ``job_dir`` may not be, hold or lie in anything the job reads from
outside: the folder the corpus glob lists, a model folder, ``embeddings:``, verify's
cross-encoder, the finetune config and data, dedup's reference folders and labels. Otherwise a
stage would read what the job itself wrote (a corpus glob matching the job's outputs) or replace
what a later stage reads (a model folder inside a stage folder). Checked before anything is
written, with or without ``--overwrite``.

Local paths are compared as the OS resolves them (``os.path.realpath``: every symbolic link
followed, so a link into the corpus folder is caught); URLs (``gs://``, ``s3://``) by their
normalised text.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Sequence

from jobs.run_config import RunConfig, stage_options
from jobs.run_table import FROM_FINETUNE
from pipelines.io.filesystems import split_pattern

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)\Z", re.DOTALL)
_GLOB = re.compile(r"[*?\[]")


def location(path: str) -> str:
    """``path`` as compared: local (``file://`` too) absolute with every link resolved; a URL
    with its scheme in lower case and repeated, trailing and ``.`` path segments dropped."""
    found = _SCHEME.match(path.strip())
    if found is None or found.group(1).lower() == "file":
        local = found.group(2) if found else path
        return os.path.realpath(os.path.expanduser(local))
    return f"{found.group(1).lower()}://{posixpath.normpath(found.group(2))}".rstrip("/.")


def relation(path: str, other: str) -> str | None:
    """How ``path`` lies to ``other``: ``"equal to"``, ``"inside"``, ``"above"`` (``other`` is
    inside it), or None when they are apart."""
    mine, theirs = location(path), location(other)
    if mine == theirs:
        return "equal to"
    if mine.startswith(theirs.rstrip("/") + "/"):
        return "inside"
    if theirs.startswith(mine.rstrip("/") + "/"):
        return "above"
    return None


def read_root(pattern: str) -> str:
    """What a glob reads: the folder it lists (``data/`` for ``data/*.jsonl``), or the path
    itself when it names one file or folder as written."""
    found = _SCHEME.match(pattern.strip())
    if (found is None or found.group(1).lower() == "file") and os.path.lexists(
        found.group(2) if found else pattern
    ):
        return pattern
    folder, rest = split_pattern(pattern)
    return (folder or ".") if _GLOB.search(rest) else pattern


def job_inputs(config: RunConfig, finetune: dict | None) -> list[tuple[str, str]]:
    """``(config key, path)`` of everything the job reads from outside ``job_dir``.

    Args:
        config: the job's config (checked).
        finetune: the finetune stage's described inputs (``CheckedInputs.finetune``), or None.
    """
    found: list[tuple[str, str]] = []
    if config.input.path.strip():
        found.append(("input.path", read_root(config.input.path)))
    if config.enabled("embed") and config.model != FROM_FINETUNE:
        found += _paths("model", [config.model])
    if config.external_embeddings:
        found.append(("embeddings.path", read_root(config.embeddings.path)))
    if config.enabled("verify"):
        found += _paths("verify.model", [stage_options(config, "verify").model])
    if finetune is not None:
        found.append(("finetune.config", stage_options(config, "finetune").config))
        found += [(f"finetune.config {e['role']}.path", e["path"]) for e in finetune["data"]]
    if config.enabled("dedup"):
        dedup = stage_options(config, "dedup")
        found += [("dedup.against", path) for path in dedup.against or ()]
        found += _paths("dedup.labels", [dedup.labels] if dedup.labels else [])
    return found


def _paths(key: str, names: Iterable[str]) -> list[tuple[str, str]]:
    """The names that are paths (a URL, or a local file or folder); a model's Hub name is not."""
    return [(key, name) for name in names if _SCHEME.match(name) or os.path.lexists(name)]


def refuse_job_dir_overlaps(job_dir: str, inputs: Sequence[tuple[str, str]]) -> None:
    """Refuse a ``job_dir`` equal to, inside or above any of ``inputs`` (see the module
    docstring).

    Raises:
        ValueError: naming both paths and the config key of the input.
    """
    for key, path in inputs:
        how = relation(job_dir, path)
        if how is None:
            continue
        written = (_as_written(job_dir), _as_written(path))
        resolved = (location(job_dir), location(path))
        through = "" if resolved == written else f" (through links: {' and '.join(resolved)})"
        raise ValueError(
            f"job_dir: {job_dir} is {how} {path} ({key}), which the job reads{through}; the job "
            "would read or replace its own outputs there: put job_dir and the job's inputs in "
            "separate folders"
        )


def _as_written(path: str) -> str:
    """A local path absolute but with its links as they are (a URL as :func:`location`)."""
    found = _SCHEME.match(path.strip())
    if found is None or found.group(1).lower() == "file":
        return os.path.abspath(os.path.expanduser(found.group(2) if found else path))
    return location(path)
