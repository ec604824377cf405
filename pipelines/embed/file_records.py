"""What an incremental embed knows about its input files (Beam-free).

An incremental embed (``--incremental``) writes the rows of each input file to parts of their
own and records, per file, its bytes, sha256 and parts in the manifest's ``input.files``. The
next run compares its input with that record (:func:`plan_version`): a file with the same path,
id prefix and sha256 keeps its parts as they are; a new or changed file is embedded; a file no
longer matched loses its parts. Inside a run, each finished file leaves a done-record in the
attempt area (``_done/<key>.json``: the file's digest, its counts, its parts with their sizes
and digests), so a rerun after a kill adopts the files it had finished (:func:`adoptable`)
instead of embedding them again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sbert_pipeline.io.content_checks import ListedFile, digest_of
from sbert_pipeline.io.corpus_files import files_sha256
from sbert_pipeline.io.output_dir import (
    CorruptOutputError,
    file_sizes,
    join,
    read_json_or_none,
    read_manifest,
)
from sbert_pipeline.io.schemas import ERRORS_DIR

DONE = "_done"  # inside an attempt area: one record per finished input file
GROUPS = "_groups"  # inside an attempt area: where one file's pipeline writes before its record
# Launch-manifest fields that do not change the rows (where and with what it ran); every other
# field (model identity, prompt, dims, dtype, reading options) must match for rows to be kept.
NOT_SETTINGS = ("runner", "software", "compute")


@dataclass(frozen=True)
class InputFile:
    """One matched input file, by content.

    Attributes:
        path: as matched.
        id_prefix: what derived ids start with (the path relative to the glob's folder).
        bytes: its size on disk.
        sha256: of its bytes on disk (compressed bytes for a compressed file).
    """

    path: str
    id_prefix: str
    bytes: int
    sha256: str

    @property
    def key(self) -> str:
        """A short name for its parts and records: a hash of the path (never the path itself,
        which may hold glob characters or be too long for a file name)."""
        return hashlib.sha256(os.fsencode(self.path)).hexdigest()[:16]

    def same_as(self, entry: Mapping) -> bool:
        """Whether a recorded file entry (``input.files[]`` or a done-record) is this file with
        these bytes, read with the same id prefix."""
        return (
            entry.get("path") == self.path
            and entry.get("sha256") == self.sha256
            and entry.get("bytes") == self.bytes
            and entry.get("id_prefix") == self.id_prefix
        )


def hash_inputs(files: Sequence[tuple[str, str, int]]) -> list[InputFile]:
    """The matched ``(path, id prefix, bytes)`` files with their sha256 (hashed in threads:
    hashlib releases the GIL; cheap next to embedding the same bytes)."""
    digests = files_sha256([path for path, _, _ in files])
    return [
        InputFile(path, prefix, size, digest)
        for (path, prefix, size), digest in zip(files, digests, strict=True)
    ]


def row_sharing_settings(manifest: Mapping) -> dict:
    """What must be equal for two embeddings versions to share rows: every launch field but
    :data:`NOT_SETTINGS`, and the reading options (``input`` without pattern and files), as
    JSON values (tuples read back as lists)."""
    reading = {
        name: value
        for name, value in (manifest.get("input") or {}).items()
        if name not in ("pattern", "files")
    }
    # What a run adds to its launch fields (and the input, compared without pattern and files).
    added = ("input", "counts", "shards", "seconds", "created", "commit", "incremental")
    fields = {
        name: value for name, value in manifest.items() if name not in (*NOT_SETTINGS, *added)
    }
    return json.loads(json.dumps({**fields, "input": reading}, sort_keys=True))


@dataclass(frozen=True)
class VersionPlan:
    """How the new version of an embeddings folder relates to the published one.

    Attributes:
        settings: this run's :func:`row_sharing_settings`.
        kept: the published ``input.files`` entries whose file is unchanged (their parts stay).
        embed: the files to embed (new, changed, or all of them in a full run), sorted by path.
        removed: the published entries not kept (file gone or changed).
        previous: the published manifest, or None.
        reason: why this is a full run; None for an incremental one.
    """

    settings: dict
    kept: tuple[dict, ...]
    embed: tuple[InputFile, ...]
    removed: tuple[dict, ...]
    previous: dict | None
    reason: str | None

    def keep_entries(self) -> list[dict]:
        """The published ``commit.files`` entries of the kept files' parts and error parts."""
        names = {name for entry in self.kept for name in _file_parts(entry)}
        files = (self.previous or {}).get("commit", {}).get("files", [])
        return [entry for entry in files if entry.get("path") in names]

    def basis(self, file: InputFile) -> list[list[str]]:
        """The files whose ids ``file``'s rows are checked against (ids stay unique across
        files): the kept ones and the files embedded before it, as ``[path, sha256]``."""
        earlier = [[f.path, f.sha256] for f in self.embed if f.path < file.path]
        return sorted([[e["path"], e["sha256"]] for e in self.kept] + earlier)


def _file_parts(entry: Mapping) -> list[str]:
    return [*entry.get("parts", []), *entry.get("error_parts", [])]


def plan_version(directory: str, launch: Mapping, inputs: Sequence[InputFile]) -> VersionPlan:
    """Compare this run's input and settings with the version published in ``directory``.

    The published manifest is read and its files verified first (sizes and digests: a kept
    part must be the bytes the manifest lists). A full run (every file embedded; ``reason``
    says why) when there is no such version, it cannot be read, it has no per-file record
    (written by a run without ``--incremental``), its settings differ, or no file is unchanged.
    """
    settings = row_sharing_settings(launch)
    everything = tuple(sorted(inputs, key=lambda f: f.path))

    def full(reason: str, previous: dict | None = None) -> VersionPlan:
        removed = tuple((previous or {}).get("input", {}).get("files", []))
        return VersionPlan(settings, (), everything, removed, previous, reason)

    try:
        previous = read_manifest(directory)
    except FileNotFoundError:
        return full("no previous version")
    except CorruptOutputError as err:
        return full(f"the previous version cannot be used: {err}")
    if previous.get("kind") != "embeddings":
        return full("the previous output is not embeddings")
    recorded = previous.get("input", {}).get("files")
    listed = {e.get("path") for e in previous.get("commit", {}).get("files", [])}
    if not isinstance(recorded, list) or not all(
        isinstance(e, dict) and "parts" in e and "sha256" in e for e in recorded
    ):
        return full("the previous version has no per-file parts (written without --incremental)")
    if any(name not in listed for e in recorded for name in _file_parts(e)):
        return full("the previous version's per-file parts are not all in its commit")
    before = row_sharing_settings(previous)
    changed = sorted(
        name for name in {*before, *settings} if before.get(name) != settings.get(name)
    )
    if changed:
        changed += [f"input.{name}" for name in _changed(before["input"], settings["input"])]
        return full(f"settings changed: {', '.join(n for n in changed if n != 'input')}", previous)
    current = {file.path: file for file in everything}
    kept = tuple(e for e in recorded if e["path"] in current and current[e["path"]].same_as(e))
    if not kept:
        return full("no input file is unchanged", previous)
    kept_paths = {e["path"] for e in kept}
    embed = tuple(file for file in everything if file.path not in kept_paths)
    removed = tuple(e for e in recorded if e["path"] not in kept_paths)
    return VersionPlan(settings, kept, embed, removed, previous, None)


def _changed(before: Mapping, after: Mapping) -> list[str]:
    return sorted(name for name in {*before, *after} if before.get(name) != after.get(name))


def part_name(key: str, written: str) -> str:
    """A file's part in the attempt area: ``part-<key>-<rest of the writer's name>``."""
    return f"part-{key}-{written.removeprefix('part-')}"


def done_path(attempt: str, file: InputFile) -> str:
    """Where the done-record of ``file`` goes in an attempt area."""
    return join(attempt, DONE, f"{file.key}.json")


def read_done(attempt: str) -> dict[str, dict]:
    """``{input path: done-record}`` of the records in an attempt area."""
    records = {}
    for name in file_sizes(join(attempt, DONE)):
        record = read_json_or_none(join(attempt, DONE, name))
        if record is not None and isinstance(record.get("path"), str):
            records[record["path"]] = record
    return records


def adoptable(plan: VersionPlan, id_field: str | None, area: str) -> set[str]:
    """What this run takes over from a killed run's attempt area ``area``: for each of its
    done-records of a file this run embeds, with the same bytes, the same settings and (with
    ``id_field``) ids checked against the same earlier files, and whose parts are all there with
    their recorded sizes and xxh3_128 digests, the record and those parts (names relative to
    ``area``)."""
    sizes = file_sizes(area)
    wanted = {file.path: file for file in plan.embed}
    names: set[str] = set()
    for name in sizes:
        if not (name.startswith(f"{DONE}/") and name.endswith(".json")):
            continue
        record = read_json_or_none(join(area, name)) or {}
        file = wanted.get(record.get("path"))
        if file is None or not file.same_as(record) or record.get("settings") != plan.settings:
            continue
        if id_field and record.get("basis") != plan.basis(file):
            continue
        parts = record.get("part_bytes") or {}
        digests = record.get("part_xxh3_128") or {}
        if parts.keys() != set(_file_parts(record)) or digests.keys() != parts.keys():
            continue
        if all(sizes.get(part) == size for part, size in parts.items()) and all(
            _holds(join(area, part), parts[part], digest) for part, digest in digests.items()
        ):
            names |= {name, *parts}
    return names


def part_digest(path: str, size: int) -> str:
    """The xxh3_128 of a finished part, recorded in its file's done-record."""
    return digest_of(ListedFile(path, size, 0.0, "", "xxh3_128"))


def _holds(path: str, size: int, digest: str) -> bool:
    """Whether the part at ``path`` still has the bytes its done-record lists (a part written
    over after the record, with its size kept, is not adopted)."""
    try:
        return part_digest(path, size) == digest
    except OSError:
        return False


def error_part(name: str) -> str:
    """The attempt-area path of an error part named ``name``."""
    return f"{ERRORS_DIR}/{name}"


def run_facts(manifest: Mapping) -> dict:
    """The key counts of an embed output for ``sbert run``'s table and report: rows read,
    embedded, rejected; after an incremental run the rows embedded by that run, and the rows of
    unchanged files it kept apart as ``reused`` (read = embedded + reused + rejected)."""
    counts = manifest.get("counts", {})
    facts = {key: counts.get(key) for key in ("read", "embedded", "rejected")}
    section = manifest.get("incremental") or {}
    if section.get("mode") != "incremental":
        return facts
    return {
        "read": facts["read"],
        "embedded": section.get("rows_new"),
        "reused": section.get("rows_old"),
        "rejected": facts["rejected"],
    }
