"""Which files of an output folder are ours: known by our records, never by their names.

A stage may delete or replace a file of its output folder only when one of our own records
lists it (docs/architecture.md, "Ownership by record"):

- ``_manifest.json``, when it is one of ours (a JSON object naming ``sbert_pipeline`` or
  carrying a ``commit`` section with a run id), and every file its ``commit`` section lists;
- ``_STARTED``, when it carries a run id: that run's attempt area ``_attempts/<run id>/``, the
  part files named after that run id (moved in by a commit it did not finish), and the files
  its commit record ``_attempts/<run id>/_commit.json`` lists (what it was publishing and what
  it was replacing);
- the attempt area of the run the manifest names (a commit killed after its manifest);
- the manifest's own temporary files (``._manifest.json.*.tmp``), which only its atomic write
  makes.

Everything else is foreign, whatever its name: a Spark ``part-00000-1b2c.snappy.parquet`` is
not ours because it looks like our parts. A survey is read-only;
:mod:`sbert_pipeline.io.staged_output` decides from it whether a run may go on, and only a run that
holds the folder and goes on clears what the records list.

Symbolic links: on local disks every entry is seen with ``lstat``. A link at a name this stage
writes, deletes or writes into (``_STARTED``, ``_attempts/``, ``_errors/``, a part, a fixed-name
file or its folder) is refused before anything is touched; object stores have no links.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import stat
from dataclasses import dataclass

from sbert_pipeline.io.atomic import is_local_path, replace
from sbert_pipeline.io.content_checks import ListedFile, digest_of, expected_digest
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import (
    ATTEMPTS,
    MANIFEST,
    PREVIOUS,
    STARTED,
    OutputExistsError,
    OutputLayout,
    delete_quietly,
    file_sizes,
    join,
    list_files,
    read_json_or_none,
)

RUN_ID = re.compile(r"^[0-9a-f]{12}$")
COMMIT_RECORD = "_commit.json"  # inside an attempt area: what its commit publishes and replaces
_SHOWN = 5  # how many kinds of foreign files a refusal names
# Runs of digits and hex ids: files that differ only there are of one kind (Spark's parts).
_ID_LIKE = re.compile(r"[0-9A-Fa-f]*[0-9][0-9A-Fa-f]*")


@dataclass(frozen=True)
class Survey:
    """What an output folder holds, and which of it our records make ours (read-only).

    Attributes:
        directory: the output folder.
        entries: every file (and every symbolic link) below it, relative, in sorted order.
        links: the entries that are symbolic links (local disks only).
        manifest: our manifest, or None (absent, or not one of ours).
        started: the run id of our ``_STARTED`` marker, or None.
        ours: the entries our records list.
    """

    directory: str
    entries: tuple[str, ...]
    links: frozenset[str]
    manifest: dict | None
    started: str | None
    ours: frozenset[str] = frozenset()

    @property
    def foreign(self) -> list[str]:
        """The entries no record of ours lists, sorted."""
        return [name for name in self.entries if name not in self.ours]

    @property
    def listed(self) -> set[str]:
        """The files our manifest lists."""
        return set(listed_files(self.manifest))

    @property
    def runs(self) -> list[str]:
        """The run ids our records name: the killed run in ``_STARTED``, the manifest's run."""
        committed = committed_run(self.manifest)
        return sorted({run for run in (self.started, committed) if run})


def committed_run(manifest: dict | None) -> str | None:
    """The run id in a manifest's ``commit`` section, if it is a valid one."""
    commit = (manifest or {}).get("commit")
    run_id = commit.get("run_id") if isinstance(commit, dict) else None
    return run_id if isinstance(run_id, str) and RUN_ID.match(run_id) else None


def listed_files(record: dict | None, key: str = "files") -> list[str]:
    """The safe relative paths a manifest's ``commit`` section (or a commit record) lists.

    A path that is absolute, empty, or climbs out with ``..`` is left out: no record of ours
    can make a file outside the folder ours.
    """
    if not isinstance(record, dict):
        return []
    section = record.get("commit", record) if key == "files" else record
    items = section.get(key, []) if isinstance(section, dict) else []
    paths = [item.get("path") if isinstance(item, dict) else item for item in items]
    return [path for path in paths if isinstance(path, str) and is_inside(path)]


def is_inside(relative: str) -> bool:
    """Whether ``relative`` names something inside a folder (no ``..``, not absolute)."""
    parts = relative.split("/")
    return bool(relative) and not relative.startswith("/") and ".." not in parts and "" not in parts


def survey(directory: str, layout: OutputLayout) -> Survey:
    """Look at ``directory`` without changing it: its entries, links and our records."""
    entries, links = _entries(directory)
    present = set(entries)
    started = started_run(directory) if STARTED in present and STARTED not in links else None
    manifest = _our_manifest(directory) if MANIFEST in present and MANIFEST not in links else None
    base = Survey(directory, tuple(entries), frozenset(links), manifest, started)
    records = {}
    for run in base.runs:
        record = read_json_or_none(join(directory, ATTEMPTS, run, COMMIT_RECORD))
        if record is not None and record.get("run_id") == run:
            records[run] = record
    ours = _ours(base, records, layout) & present
    return Survey(directory, tuple(entries), frozenset(links), manifest, started, ours)


def _ours(found: Survey, records: dict[str, dict], layout: OutputLayout) -> set[str]:
    ours = set(found.listed)
    if found.manifest is not None:
        ours.add(MANIFEST)
    if found.started is not None:
        ours.add(STARTED)
    for record in records.values():
        ours.update(listed_files(record, "publishes"))
        ours.update(listed_files(record, "replaced"))
    areas = tuple(f"{ATTEMPTS}/{run}/" for run in found.runs)
    moved = f"part-{found.started}-" if found.started else None
    datasets = (*layout.datasets, *layout.legacy_datasets)
    for name in found.entries:
        folder, _, base = name.rpartition("/")
        killed_part = moved and base.startswith(moved) and base.endswith(".parquet")
        if (
            name.startswith(areas)
            or fnmatch.fnmatch(name, f".{MANIFEST}.*.tmp")
            or (killed_part and folder in datasets)
        ):
            ours.add(name)
    return ours


def started_run(directory: str) -> str | None:
    """The run id in the top-level ``_STARTED`` marker, if it is one of ours."""
    marker = read_json_or_none(join(directory, STARTED))
    run_id = marker.get("run_id") if marker else None
    return run_id if isinstance(run_id, str) and RUN_ID.match(run_id) else None


def _our_manifest(directory: str) -> dict | None:
    manifest = read_json_or_none(join(directory, MANIFEST))
    if manifest is None:
        return None
    software = manifest.get("software")
    if committed_run(manifest) or (isinstance(software, dict) and "sbert_pipeline" in software):
        return manifest
    return None


def _entries(directory: str) -> tuple[list[str], set[str]]:
    """Every file and link below ``directory``, relative and sorted; and the links among them.

    Locally the walk never follows a link below the folder (a linked folder is one entry);
    elsewhere it is Beam's listing, where there are no links.
    """
    if not is_local_path(directory):
        return sorted(file_sizes(directory)), set()
    root = directory.removeprefix("file://")
    if not os.path.isdir(root):
        return [], set()
    entries, links = [], set()
    for folder, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, root).replace(os.sep, "/")
            if os.path.islink(path):
                links.add(relative)
                entries.append(relative)
            elif name in filenames:
                entries.append(relative)
    return sorted(entries), links


def in_namespace(relative: str, layout: OutputLayout) -> bool:
    """Whether this stage may write, delete or write into ``relative`` (by name).

    The markers and attempt areas, a dataset's folder and parts, the fixed-name files and the
    folders they sit in.
    """
    if layout.owns(relative):
        return True
    folders = {ATTEMPTS, *layout.datasets, *layout.legacy_datasets}
    folders.update(pattern.rpartition("/")[0] for pattern in layout.files)
    folders.discard("")
    return any(relative == folder or relative.startswith(f"{folder}/") for folder in folders)


def collides(relative: str, layout: OutputLayout) -> bool:
    """Whether a foreign file at ``relative`` is in this stage's way even with ``--overwrite``.

    The stage would replace it (a marker or fixed-name file), could not make a folder it needs
    there, or a reader of the folder would read it with our parts (a Parquet file in a dataset
    folder).
    """
    if relative in (MANIFEST, STARTED, ATTEMPTS):
        return True
    if relative in {*layout.datasets, *layout.legacy_datasets} - {""}:
        return True
    if any(relative == pattern.rpartition("/")[0] for pattern in layout.files):
        return True
    folder, _, base = relative.rpartition("/")
    parquet = base.endswith(".parquet") and not base.startswith(("_", "."))
    if folder in layout.datasets and parquet:
        return True
    return any(fnmatch.fnmatch(relative, pattern) for pattern in layout.files)


def refuse_takeover(found: Survey, layout: OutputLayout, *, overwrite: bool) -> None:
    """Refuse to take the folder when that would touch what is not ours (nothing is changed).

    Raises:
        OutputExistsError: a link at one of our names; a foreign file in our way (even with
            ``overwrite``); foreign files, or a complete output, without ``overwrite``. The
            message names the files (up to five kinds) and what to do.
    """
    directory = found.directory
    linked = [name for name in sorted(found.links) if in_namespace(name, layout)]
    if linked:
        raise OutputExistsError(
            f"{join(directory, linked[0])} is a symbolic link: this stage writes and deletes "
            "that name itself and never through a link; remove the link or choose another "
            "output directory"
        )
    foreign = found.foreign
    blocking = [name for name in foreign if collides(name, layout)]
    held = f"{directory} holds {len(foreign)} file(s) this stage did not write"
    if blocking:
        raise OutputExistsError(
            f"{held} ({describe(foreign)}); {len(blocking)} of them ({describe(blocking)}) "
            "at names this stage writes or beside its parts, where a reader of the folder would "
            "take them for ours, so the folder is refused even with --overwrite (and left as it "
            "is); move them away or choose another output directory"
        )
    if foreign and not overwrite:
        raise OutputExistsError(
            f"{held} ({describe(foreign)}); pass --overwrite to write next to them (they are "
            "kept), or choose another output directory"
        )
    if found.manifest is not None and not overwrite:
        raise OutputExistsError(
            f"{directory} already holds a complete output; pass --overwrite to replace it, or "
            "choose another output directory"
        )


def describe(names: list[str]) -> str:
    """The kinds of files in ``names`` (the first five): one example of each, and how many more.

    Example:
        >>> describe(["_SUCCESS", "part-00000-1b2c.parquet", "part-00001-1b2c.parquet"])
        '_SUCCESS, part-00000-1b2c.parquet (and 1 more like it)'
    """
    kinds: dict[str, list[str]] = {}
    for name in sorted(names):
        kinds.setdefault(_ID_LIKE.sub("#", name), []).append(name)
    shown = []
    for examples in list(kinds.values())[:_SHOWN]:
        more = f" (and {len(examples) - 1} more like it)" if len(examples) > 1 else ""
        shown.append(f"{_printable(examples[0])}{more}")
    others = len(kinds) - _SHOWN
    tail = f", and {others} other kinds of file" if others > 0 else ""
    return ", ".join(shown) + tail


def _printable(name: str) -> str:
    """``name`` as it is, or quoted with escapes when it holds unprintable characters (a file
    name that is not UTF-8 carries surrogates)."""
    return name if name.isprintable() else ascii(name)


def is_link_on_path(directory: str, relative: str) -> str | None:
    """The first component of ``relative`` inside ``directory`` that is a symbolic link.

    Local disks only (None elsewhere, and when no component is a link or exists).
    """
    if not is_local_path(directory):
        return None
    path = directory.removeprefix("file://")
    walked = []
    for part in relative.split("/"):
        path = os.path.join(path, part)
        walked.append(part)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return "/".join(walked)
        except FileNotFoundError:
            return None
    return None


def restore_previous(found: Survey) -> None:
    """Put back the files a killed commit had set aside, where that repairs the folder.

    Only the ``_previous/`` area of a recorded run that did not publish is read (what it holds
    was the previous output's, moved there by ``StagedOutput._publish``), and a file goes back
    only when it is the one the manifest lists (size and sha256) and the file in its place is
    not: a stale backup never replaces a good file.
    """
    committed = committed_run(found.manifest)
    listed = {
        entry["path"]: entry
        for entry in (found.manifest or {}).get("commit", {}).get("files", [])
        if isinstance(entry, dict) and isinstance(entry.get("path"), str)
    }
    for run in found.runs:
        if run == committed:
            continue
        saved = f"{ATTEMPTS}/{run}/{PREVIOUS}/"
        for name in found.entries:
            final = name.removeprefix(saved)
            entry = listed.get(final)
            if not name.startswith(saved) or entry is None or name in found.links:
                continue
            backup, target = join(found.directory, name), join(found.directory, final)
            if _matches(backup, entry) and not _matches(target, entry):
                replace(backup, target)


def _matches(path: str, entry: dict) -> bool:
    """Whether the file at ``path`` is the one a manifest entry describes: its size, and the
    digest readers check (:func:`sbert_pipeline.io.content_checks.expected_digest`)."""
    expected = expected_digest(entry)
    found = FileSystems.match([path])[0].metadata_list if FileSystems.exists(path) else []
    if expected is None or len(found) != 1 or found[0].size_in_bytes != entry.get("bytes"):
        return False
    algorithm, digest = expected
    try:
        return digest_of(ListedFile(path, found[0].size_in_bytes, 0.0, digest, algorithm)) == digest
    except OSError:
        return False


def clear_attempt(directory: str, run_id: str) -> None:
    """Delete one run's attempt area ``_attempts/<run id>/`` (ours by record), then
    ``_attempts/`` itself if nothing else is in it.

    Locally the walk never follows a link: a link found there (made after the folder was
    checked) is left as it is, and so is the folder holding it.
    """
    area = join(directory, ATTEMPTS, run_id)
    if not is_local_path(area):
        delete_quietly(list_files(area))
        return
    local = area.removeprefix("file://")
    if is_link_on_path(directory, f"{ATTEMPTS}/{run_id}") or not os.path.isdir(local):
        return
    for folder, _, names in sorted(os.walk(local), key=lambda item: -len(item[0])):
        for name in names:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        with contextlib.suppress(OSError):  # not empty: what is not ours stays
            os.rmdir(folder)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(local))


def delete_owned(directory: str, names: list[str]) -> None:
    """Delete files of ``directory`` that a record of ours lists, never through a link.

    A name with a link on its path, or that is not a plain file, is left as it is (the checks
    before the run refuse such folders; this guards what changed since).
    """
    for name in names:
        path = join(directory, name)
        if not is_local_path(directory):
            delete_quietly([path])
            continue
        if is_link_on_path(directory, name):
            continue
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
            if os.path.isfile(path.removeprefix("file://")):
                os.unlink(path.removeprefix("file://"))
