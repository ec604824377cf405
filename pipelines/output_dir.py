"""Output directories that appear whole or not at all, on any Beam filesystem.

A stage's output directory is *complete* when its ``_manifest.json`` exists: the manifest is
written last, only after every shard is in place, and readers refuse a directory without one.
A ``_STARTED`` marker is written first; a directory holding the marker but no manifest is the
remains of a run that was killed, and the next run clears it without needing ``--overwrite``.
"""

from __future__ import annotations

import json

from apache_beam.io.filesystems import FileSystems

MANIFEST = "_manifest.json"
STARTED = "_STARTED"


class OutputExistsError(FileExistsError):
    """The output directory holds something we must not overwrite without being told to."""


def join(directory: str, *parts: str) -> str:
    """Join path parts on any Beam filesystem."""
    return FileSystems.join(directory, *parts)


def list_files(directory: str) -> list[str]:
    """Every file below ``directory`` (recursively); empty if it does not exist."""
    if not FileSystems.exists(directory):
        return []
    return [m.path for m in FileSystems.match([join(directory, "**")])[0].metadata_list]


def prepare_output(directory: str, *, overwrite: bool, job: dict) -> None:
    """Make ``directory`` ready for a new run and mark it as started.

    Args:
        directory: where the stage writes.
        overwrite: replace a complete earlier output (or any foreign content).
        job: what the ``_STARTED`` marker records (command, time) for a later reader.

    Raises:
        OutputExistsError: non-empty and neither ``overwrite`` nor an interrupted run of ours.
    """
    files = list_files(directory)
    if files:
        names = {path.rsplit("/", 1)[-1] for path in files}
        interrupted = STARTED in names and MANIFEST not in names
        if not (overwrite or interrupted):
            raise OutputExistsError(
                f"{directory} exists and is not empty ({len(files)} files); pass --overwrite to "
                "replace it, or choose another output directory"
            )
        FileSystems.delete([directory])
    if not FileSystems.exists(directory):
        FileSystems.mkdirs(directory)
    write_json(join(directory, STARTED), job)


def commit_output(directory: str, manifest: dict) -> None:
    """Write the manifest (the commit point), then drop the started marker."""
    write_json(join(directory, MANIFEST), manifest)
    FileSystems.delete([join(directory, STARTED)])


def write_json(path: str, value: dict) -> None:
    """Write JSON to any Beam filesystem (one object write: complete or absent on GCS/S3)."""
    with FileSystems.create(path, mime_type="application/json") as handle:
        handle.write((json.dumps(value, indent=2, default=str) + "\n").encode("utf-8"))


def read_manifest(directory: str) -> dict:
    """The manifest of a complete output directory.

    Raises:
        FileNotFoundError: no manifest, i.e. the directory is missing or its run did not finish.
    """
    path = join(directory, MANIFEST)
    if not FileSystems.exists(path):
        raise FileNotFoundError(
            f"{directory} has no {MANIFEST}: it does not exist or the job that wrote it did not "
            "finish; rerun that job"
        )
    with FileSystems.open(path) as handle:
        return json.loads(handle.read().decode("utf-8"))
