"""Output directories that appear whole or not at all, on any Beam filesystem: the folder contract.

A stage never writes its results straight into its output directory. The life of one run:

1. ``prepare_output`` takes the folder: on local disks it holds an exclusive ``flock`` on the
   directory for the whole run (a second run is refused with the holder's pid, host and start
   time); it refuses a folder holding files no record of ours lists (naming their kinds) unless
   ``--overwrite`` is given, and a link at one of our names always; it clears what a killed run
   of ours left, by record (:mod:`sbert_pipeline.io.ownership`); it writes ``_STARTED`` carrying a
   fresh run id.
2. The stage writes everything under ``_attempts/<run_id>/`` (dataset readers skip names that
   start with ``_``), laid out as the final output will be.
3. ``StagedOutput.commit`` checks that ``_STARTED`` still carries its run id (on object stores,
   where there is no lock, a run that lost the folder publishes nothing), moves the files to
   their final names (Parquet parts get the run id in their name, so they never replace the
   previous run's parts), then writes ``_manifest.json`` in one atomic step (temporary file and
   rename locally; one object write on object stores). The manifest lists every file with its
   size, sha256, xxh3_128 and, for Parquet, its row count. Only then are the files the previous
   manifest listed and the new one does not deleted.

Every name a stage leaves inside a folder that holds Parquet parts, other than the parts
themselves, starts with ``_`` or ``.`` (``_manifest.json``, ``_STARTED``, ``_attempts/``, the
embed stage's ``_errors/``), so that pandas, pyarrow.dataset and Spark read the folder as one
dataset of parts; DuckDB and polars read it as ``DIR/*.parquet``.

This module holds the contract every reader relies on (names, the manifest, ``read_manifest``);
:mod:`sbert_pipeline.io.staged_output` holds the writer's side (the lock, the attempt area, the
commit).

The manifest is the commit: a reader opens a folder through ``read_manifest``, which refuses a
folder whose files disagree with its manifest (a listed file missing, of another size or whose
bytes do not hash to its digest, a part file no manifest lists) and names the file; the content
check (:mod:`sbert_pipeline.io.content_checks`) is what ``--no-verify`` turns off. A failed, killed
or refused rerun leaves the previous complete output readable; the next run clears the remains.

Limits: fixed-name files (``index.faiss``, ``centroids.npy``, ...) are replaced by a rename in
the short commit step itself, so a kill inside that step leaves a folder that readers refuse
(naming the file) rather than the previous output. On object stores there is no lock: two runs
started together can both prepare the folder; the one whose run id is no longer in
``_STARTED`` publishes nothing.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sbert_pipeline.io.atomic import is_local_path, json_text, write_json_replacing
from sbert_pipeline.io.content_checks import (
    ListedFile,
    changed_files,
    checking_contents,
    expected_digest,
)
from sbert_pipeline.io.filesystems import CompressionTypes, FileSystems

if TYPE_CHECKING:
    from sbert_pipeline.io.filesystems import FileMetadata

MANIFEST = "_manifest.json"
STARTED = "_STARTED"
ATTEMPTS = "_attempts"
PREVIOUS = "_previous"  # inside an attempt area: the previous output's files during a commit


class OutputExistsError(FileExistsError):
    """The output directory holds something we must not overwrite without being told to."""


class OutputLockedError(FileExistsError):
    """Another run holds the output directory (or took it over before this run published)."""


class CorruptOutputError(ValueError):
    """An output directory's files disagree with its manifest, or the manifest is unreadable."""


def join(directory: str, *parts: str) -> str:
    """Join path parts on any Beam filesystem."""
    return FileSystems.join(directory, *parts)


def list_files(directory: str) -> list[str]:
    """Every file below ``directory`` (recursively); empty if it does not exist."""
    if not FileSystems.exists(directory):
        return []
    return [m.path for m in FileSystems.match([join(directory, "**")])[0].metadata_list]


def relative_to(directory: str, path: str) -> str:
    root = directory.rstrip("/")
    return path[len(root) :].lstrip("/") if path.startswith(root) else path


def file_sizes(directory: str) -> dict[str, int]:
    """``{relative path: bytes}`` of every file below ``directory``."""
    return {name: meta.size_in_bytes for name, meta in file_metadata(directory).items()}


def file_metadata(directory: str) -> dict[str, FileMetadata]:
    """``{relative path: metadata (path, size, modification time)}`` of every file below
    ``directory``; empty if it does not exist."""
    if not FileSystems.exists(directory):
        return {}
    matched = FileSystems.match([join(directory, "**")])[0].metadata_list
    return {relative_to(directory, m.path): m for m in matched}


@dataclass(frozen=True)
class OutputLayout:
    """The names a stage writes, relative to its output directory.

    Attributes:
        datasets: folders (``""`` for the top level) holding Parquet part files; their parts
            get the run id in their name at commit, and any unlisted file in them is refused.
        files: glob patterns of the other files the stage writes (``index.faiss``,
            ``shards/*.faiss``, ...).
        legacy_datasets: dataset folders that earlier versions wrote and this one no longer
            does (the embed stage's ``errors/``, now ``_errors/``): their parts still count as
            ours, so ``--overwrite`` replaces such an output and a rerun clears its remains.
    """

    datasets: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    legacy_datasets: tuple[str, ...] = ()

    def owns(self, relative: str) -> bool:
        """Whether a file at ``relative`` is one this stage writes, or an earlier version wrote."""
        if relative in (MANIFEST, STARTED) or relative.startswith(f"{ATTEMPTS}/"):
            return True
        if fnmatch.fnmatch(relative, f".{MANIFEST}.*.tmp"):
            return True
        folder, _, name = relative.rpartition("/")
        if folder in (*self.datasets, *self.legacy_datasets) and _is_part(name):
            return True
        return any(fnmatch.fnmatch(relative, pattern) for pattern in self.files)

    def publishes(self, relative: str) -> bool:
        """Whether the commit moves a file of the attempt area (``relative`` to it) into place.

        A dataset's parts are published even in a folder named with ``_`` (``_errors/``); any
        other name with a part starting with ``_`` or ``.`` (ledgers, work areas), a runner's
        ``beam-temp-*`` folder, or a ``.tmp`` file stays behind.
        """
        folder, _, name = relative.rpartition("/")
        if folder in self.datasets and _is_part(name):
            return True
        hidden = any(part.startswith(("_", ".", "beam-temp-")) for part in relative.split("/"))
        return not hidden and not relative.endswith(".tmp")


def _is_part(name: str) -> bool:
    return fnmatch.fnmatch(name, "part-*.parquet")


def read_json_or_none(path: str) -> dict | None:
    """A small JSON file as a dict; None when missing, empty or unparsable."""
    if not FileSystems.exists(path):
        return None
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            value = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def delete_quietly(paths: list[str]) -> None:
    for path in paths:
        if FileSystems.exists(path):
            FileSystems.delete([path])


def remove_empty_folders(directory: str, folders: tuple[str, ...]) -> None:
    """Remove ``folders`` of ``directory`` that are now empty (local disks; object stores have
    no folders); a folder that still holds anything stays."""
    if not is_local_path(directory):
        return
    for folder in folders:
        with contextlib.suppress(OSError):
            os.rmdir(join(directory, folder).removeprefix("file://"))


def write_manifest(directory: str, manifest: dict) -> None:
    """Write ``_manifest.json`` so that it appears whole or not at all.

    Locally: a temporary file in the same folder, flushed to disk, renamed over the manifest (a
    full disk fails the write and leaves the previous manifest). On object stores: one object
    write, which is complete or absent. See :mod:`sbert_pipeline.io.atomic`.
    """
    write_json_replacing(join(directory, MANIFEST), manifest)


def write_json(path: str, value: dict) -> None:
    """Write JSON to any Beam filesystem (one object write: complete or absent on GCS/S3)."""
    with FileSystems.create(path, mime_type="application/json") as handle:
        handle.write(json_text(value).encode("utf-8"))


def read_manifest(directory: str, *, verify: bool = True) -> dict:
    """The manifest of a complete output directory, checked against the files beside it.

    Args:
        directory: a stage's output directory.
        verify: check the files the manifest lists (see :func:`verify_files`): each there with
            its size and, unless :func:`sbert_pipeline.io.content_checks.content_checks` turned it
            off (``--no-verify``), its digest; and no dataset folder holding a part file the
            manifest does not list.

    Raises:
        FileNotFoundError: no manifest, i.e. the directory is missing or its run did not finish.
        CorruptOutputError: the manifest is empty or unparsable, or the files disagree with it;
            the message names the file.
    """
    path = join(directory, MANIFEST)
    if not FileSystems.exists(path):
        raise FileNotFoundError(
            f"{directory} has no {MANIFEST}: it does not exist or the job that wrote it did not "
            "finish; rerun that job"
        )
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        raw = handle.read()
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        what = "is empty" if not raw.strip() else f"is not valid JSON ({err})"
        raise CorruptOutputError(
            f"{path} {what}: the run that wrote it did not finish cleanly; rerun that job with "
            "--overwrite"
        ) from None
    if not isinstance(manifest, dict):
        raise CorruptOutputError(f"{path} is not a manifest (a JSON object); rerun that job")
    if verify:
        verify_files(directory, manifest, contents=checking_contents())
    return manifest


def verify_files(directory: str, manifest: dict, *, contents: bool = True) -> None:
    """Refuse a folder whose files disagree with the manifest's ``commit`` list, naming the file.

    Every listed file must be there with its size and, with ``contents``, with its digest
    (a file changed in place keeps its size); a dataset folder may hold no Parquet file the
    manifest does not list (a Parquet reader of the folder would read it). A manifest without a
    ``commit`` section (written by an earlier version) is not checked.
    """
    commit = manifest.get("commit")
    if not isinstance(commit, dict):
        return
    found = file_metadata(directory)
    listed = {}
    for entry in commit.get("files", []):
        listed[entry["path"]] = entry
        meta = found.get(entry["path"])
        if meta is None:
            raise CorruptOutputError(
                f"{join(directory, entry['path'])} is listed in {MANIFEST} but missing; the "
                "output is damaged; rerun the job that wrote it with --overwrite"
            )
        if meta.size_in_bytes != entry["bytes"]:
            raise CorruptOutputError(
                f"{join(directory, entry['path'])} is {meta.size_in_bytes} bytes but "
                f"{MANIFEST} says {entry['bytes']}: it was truncated or replaced; rerun the job "
                "that wrote it with --overwrite"
            )
    _refuse_unlisted(directory, found, listed, set(commit.get("datasets", [])))
    if contents:
        _refuse_changed(directory, [(found[name], entry) for name, entry in listed.items()])


def _refuse_unlisted(
    directory: str, found: dict[str, FileMetadata], listed: dict[str, dict], datasets: set[str]
) -> None:
    """Refuse a Parquet file in a dataset folder that the manifest does not list."""
    for name in sorted(found):
        folder, _, base = name.rpartition("/")
        stray = base.endswith(".parquet") and not base.startswith(("_", "."))
        if folder in datasets and name not in listed and stray:
            raise CorruptOutputError(
                f"{join(directory, name)} is not listed in {MANIFEST}: it was left by a run that "
                "did not finish, or added by hand; rerun the job (it clears its own remains) or "
                "remove the file"
            )


def _refuse_changed(directory: str, files: list[tuple[FileMetadata, dict]]) -> None:
    """Refuse the folder if a listed file's bytes do not hash to the digest the manifest records
    (its xxh3_128, else its sha256; an entry with neither, from an earlier version, is not
    compared)."""
    checked = []
    for meta, entry in files:
        expected = expected_digest(entry)
        if expected is not None:
            algorithm, digest = expected
            modified = meta.last_updated_in_seconds
            checked.append(ListedFile(meta.path, meta.size_in_bytes, modified, digest, algorithm))
    changed = changed_files(checked)
    if changed:
        more = len(changed) - 1
        others = f" (and {more} other listed file{'s' if more > 1 else ''})" if more else ""
        raise CorruptOutputError(
            f"{changed[0]} does not match its digest in {join(directory, MANIFEST)}{others}: "
            "its bytes were changed after the run that wrote it; rerun that job with "
            "--overwrite"
        )


def listed_parts(directory: str, manifest: dict, folder: str = "") -> list[str] | None:
    """The part files of ``folder`` that the manifest lists, sorted; None for older manifests."""
    commit = manifest.get("commit")
    if not isinstance(commit, dict):
        return None
    paths = []
    for entry in commit.get("files", []):
        parent, _, name = entry["path"].rpartition("/")
        if parent == folder and fnmatch.fnmatch(name, "part-*.parquet"):
            paths.append(join(directory, entry["path"]))
    return sorted(paths)
