"""Output directories that appear whole or not at all, on any Beam filesystem.

A stage never writes its results straight into its output directory. The life of one run:

1. ``prepare_output`` takes the folder: on local disks it holds an exclusive ``flock`` on the
   directory for the whole run (a second run is refused with the holder's pid, host and start
   time); it refuses a folder holding files this project did not write (naming the first one)
   unless ``--overwrite`` is given; it clears what a killed run of ours left, by name only; it
   writes ``_STARTED`` carrying a fresh run id.
2. The stage writes everything under ``_attempts/<run_id>/`` (dataset readers skip names that
   start with ``_``), laid out as the final output will be.
3. ``StagedOutput.commit`` checks that ``_STARTED`` still carries its run id (on object stores,
   where there is no lock, a run that lost the folder publishes nothing), moves the files to
   their final names (Parquet parts get the run id in their name, so they never replace the
   previous run's parts), then writes ``_manifest.json`` in one atomic step (temporary file and
   rename locally; one object write on object stores). The manifest lists every file with its
   size, sha256 and, for Parquet, its row count. Only then are the previous run's files that
   the new manifest does not list deleted, by name.

The manifest is the commit: a reader opens a folder through ``read_manifest``, which refuses a
folder whose files disagree with its manifest (a listed file missing or of another size, a part
file no manifest lists) and names the file. A failed, killed or refused rerun leaves the
previous complete output readable; the next run clears the remains.

Limits: fixed-name files (``index.faiss``, ``centroids.npy``, ...) are replaced by a rename in
the short commit step itself, so a kill inside that step leaves a folder that readers refuse
(naming the file) rather than the previous output. On object stores there is no lock: two runs
started together can both prepare the folder; the one whose run id is no longer in
``_STARTED`` publishes nothing.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import logging
import os
import re
import socket
import tempfile
import time
import uuid
from dataclasses import dataclass

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

logger = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
STARTED = "_STARTED"
ATTEMPTS = "_attempts"
PREVIOUS = "_previous"  # inside an attempt area: the previous output's files during a commit
_CHUNK = 1 << 22
_RUN_ID = re.compile(r"^[0-9a-f]{12}$")


class OutputExistsError(FileExistsError):
    """The output directory holds something we must not overwrite without being told to."""


class OutputLockedError(FileExistsError):
    """Another run holds the output directory (or took it over before this run published)."""


class CorruptOutputError(ValueError):
    """An output directory's files disagree with its manifest, or the manifest is unreadable."""


def join(directory: str, *parts: str) -> str:
    """Join path parts on any Beam filesystem."""
    return FileSystems.join(directory, *parts)


def is_local(path: str) -> bool:
    """Whether ``path`` is on the local filesystem (where locks and ``os.replace`` work)."""
    return "://" not in path or path.startswith("file://")


def list_files(directory: str) -> list[str]:
    """Every file below ``directory`` (recursively); empty if it does not exist."""
    if not FileSystems.exists(directory):
        return []
    return [m.path for m in FileSystems.match([join(directory, "**")])[0].metadata_list]


def _relative(directory: str, path: str) -> str:
    root = directory.rstrip("/")
    return path[len(root) :].lstrip("/") if path.startswith(root) else path


def _sizes(directory: str) -> dict[str, int]:
    """``{relative path: bytes}`` of every file below ``directory``."""
    if not FileSystems.exists(directory):
        return {}
    matched = FileSystems.match([join(directory, "**")])[0].metadata_list
    return {_relative(directory, m.path): m.size_in_bytes for m in matched}


@dataclass(frozen=True)
class OutputLayout:
    """The names a stage writes, relative to its output directory.

    Attributes:
        datasets: folders (``""`` for the top level) holding Parquet part files; their parts
            get the run id in their name at commit, and any unlisted file in them is refused.
        files: glob patterns of the other files the stage writes (``index.faiss``,
            ``shards/*.faiss``, ...).
    """

    datasets: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    def owns(self, relative: str) -> bool:
        """Whether a file at ``relative`` is one this stage writes (by name)."""
        if relative in (MANIFEST, STARTED) or relative.startswith(f"{ATTEMPTS}/"):
            return True
        if fnmatch.fnmatch(relative, f".{MANIFEST}.*.tmp"):
            return True
        folder, _, name = relative.rpartition("/")
        if folder in self.datasets and fnmatch.fnmatch(name, "part-*.parquet"):
            return True
        return any(fnmatch.fnmatch(relative, pattern) for pattern in self.files)


@dataclass
class _Lock:
    """An exclusive ``flock`` on the output directory itself, held while the descriptor is open.

    Locking the directory (not a lock file in it) leaves no file behind and cannot race with a
    lock file being removed; the kernel drops the lock when the process dies, even by SIGKILL.
    """

    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _holder(run_id: str, job: dict) -> dict:
    return {
        "run_id": run_id,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **job,
    }


def _describe_holder(holder: dict) -> str:
    return (
        f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, started "
        f"{holder.get('started', '?')} ({holder.get('command', 'sbert')})"
    )


def _take_lock(directory: str) -> _Lock | None:
    """Lock ``directory`` for this run (local disks); refuse if a live run holds it.

    Returns None where the filesystem has no such locks (object stores; some network mounts).
    """
    if not is_local(directory):
        return None
    import fcntl

    fd = os.open(directory.removeprefix("file://"), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        other = _read_json(join(directory, STARTED)) or {}
        raise OutputLockedError(
            f"{directory} is in use by another run ({_describe_holder(other)}); wait for it to "
            "finish or write to another output directory"
        ) from None
    except OSError:
        os.close(fd)
        logger.warning("%s: this filesystem does not support locks; not locked", directory)
        return None
    return _Lock(fd)


def _read_json(path: str) -> dict | None:
    """A small JSON file as a dict; None when missing, empty or unparsable."""
    if not FileSystems.exists(path):
        return None
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            value = json.loads(handle.read().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _started_run(directory: str) -> str | None:
    """The run id in the top-level ``_STARTED`` marker, if it is one of ours."""
    marker = _read_json(join(directory, STARTED))
    run_id = marker.get("run_id") if marker else None
    return run_id if isinstance(run_id, str) and _RUN_ID.match(run_id) else None


@dataclass
class StagedOutput:
    """One run's hold on an output directory: where to write, and how to publish.

    Write everything below :attr:`attempt` (``path(...)`` joins into it), then call
    :meth:`commit` with the manifest. Use it as a context manager so that the lock is
    released however the stage ends.
    """

    directory: str
    run_id: str
    layout: OutputLayout
    _lock: _Lock | None = None

    @property
    def attempt(self) -> str:
        """``DIR/_attempts/<run_id>``: where this run writes before it publishes."""
        return join(self.directory, ATTEMPTS, self.run_id)

    def path(self, *parts: str) -> str:
        """A path inside this run's attempt area."""
        return join(self.attempt, *parts)

    def __enter__(self) -> StagedOutput:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        """Drop the lock (a run that did not commit leaves its attempt for the next run)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def final_name(self, relative: str) -> str:
        """Where a file of the attempt area goes: parts of a dataset carry the run id."""
        folder, _, name = relative.rpartition("/")
        if folder in self.layout.datasets and fnmatch.fnmatch(name, "part-*.parquet"):
            if self.run_id not in name:
                name = f"part-{self.run_id}-{name.removeprefix('part-')}"
            return f"{folder}/{name}" if folder else name
        return relative

    def commit(self, manifest: dict) -> dict:
        """Publish the attempt: move its files, write the manifest, drop the previous run's files.

        Args:
            manifest: the stage's manifest; a ``commit`` section (run id, datasets, and every
                file with bytes, sha256 and Parquet rows) is added to it.

        Returns:
            The manifest written.

        Raises:
            OutputLockedError: another run took the folder over; nothing was published.
        """
        if _started_run(self.directory) != self.run_id:
            raise OutputLockedError(
                f"{self.directory} was taken over by another run while this one ran; this run "
                "published nothing"
            )
        previous = _read_json(join(self.directory, MANIFEST))
        moves = []
        for relative, size in sorted(_sizes(self.attempt).items()):
            parts = relative.split("/")
            if any(
                part.startswith(("_", ".", "beam-temp-")) for part in parts
            ) or relative.endswith(".tmp"):
                continue  # ledgers, retried writers' and runner temporaries stay behind
            moves.append((relative, self.final_name(relative), size))
        entries = [_describe_file(self.path(source), final, size) for source, final, size in moves]
        written = {
            **manifest,
            "commit": {
                "run_id": self.run_id,
                "datasets": list(self.layout.datasets),
                "files": entries,
            },
        }
        self._publish([(source, final) for source, final, _ in moves], written)
        kept = {entry["path"] for entry in entries}
        stale = [name for name in _listed(previous) if name not in kept]
        if previous is not None and "commit" not in previous:  # written before manifests listed
            stale = [
                name
                for name in _sizes(self.directory)
                if name not in kept and self.layout.owns(name) and not _is_marker(name)
            ]
        _delete_quietly([join(self.directory, name) for name in stale])
        _delete_quietly([join(self.directory, STARTED)])
        _clear_attempts(self.directory)
        self.release()
        return written

    def _publish(self, moves: list[tuple[str, str]], manifest: dict) -> None:
        """Move the files into place and write the manifest; undo the moves if either fails.

        A fixed-name file of the previous output is first moved to ``_previous/`` in the
        attempt area, so a failure (a full disk at the manifest write) puts it back, and the
        next run puts it back after a kill (see ``_restore_previous``).
        """
        done: list[tuple[str, str]] = []
        saved: list[tuple[str, str]] = []
        try:
            for source, final in moves:
                target = join(self.directory, final)
                if FileSystems.exists(target):
                    backup = self.path(PREVIOUS, final)
                    _move(target, backup)
                    saved.append((target, backup))
                _move(self.path(source), target)
                done.append((self.path(source), target))
            write_manifest(self.directory, manifest)
        except BaseException:
            for source, target in reversed(done):
                with contextlib.suppress(OSError):
                    _move(target, source)
            for target, backup in saved:
                with contextlib.suppress(OSError):
                    _move(backup, target)
            raise


def _restore_previous(directory: str, manifest: dict | None) -> None:
    """Put back the files a killed commit had set aside, unless that commit's manifest is in.

    Only ``_attempts/<run id>/_previous/`` areas are read; what they hold was the previous
    output's, moved there by ``StagedOutput._publish``.
    """
    committed = (manifest or {}).get("commit", {}).get("run_id") if manifest else None
    root = join(directory, ATTEMPTS)
    for path in list_files(root):
        run_id, _, rest = _relative(root, path).partition("/")
        if not _RUN_ID.match(run_id) or run_id == committed:
            continue
        if rest.startswith(f"{PREVIOUS}/"):
            _move(path, join(directory, rest.removeprefix(f"{PREVIOUS}/")))


def _is_marker(relative: str) -> bool:
    return (
        relative in (MANIFEST, STARTED)
        or relative.startswith(f"{ATTEMPTS}/")
        or relative.startswith(f".{MANIFEST}")
    )


def _listed(manifest: dict | None) -> list[str]:
    if not manifest or not isinstance(manifest.get("commit"), dict):
        return []
    return [entry["path"] for entry in manifest["commit"].get("files", [])]


def _describe_file(path: str, final: str, size: int) -> dict:
    hasher = hashlib.sha256()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    entry: dict = {"path": final, "bytes": size, "sha256": hasher.hexdigest()}
    if final.endswith(".parquet"):
        import pyarrow.parquet as pq

        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            entry["rows"] = pq.ParquetFile(handle).metadata.num_rows
    return entry


def _move(source: str, destination: str) -> None:
    if is_local(destination):
        target = destination.removeprefix("file://")
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        os.replace(source.removeprefix("file://"), target)
        return
    if FileSystems.exists(destination):
        FileSystems.delete([destination])
    FileSystems.rename([source], [destination])


def _delete_quietly(paths: list[str]) -> None:
    for path in paths:
        if FileSystems.exists(path):
            FileSystems.delete([path])


def _clear_attempts(directory: str) -> None:
    """Delete every file of ``_attempts/<run id>/`` areas (ours by name), then the empty folders."""
    root = join(directory, ATTEMPTS)
    files = [
        path
        for path in list_files(root)
        if _RUN_ID.match(_relative(root, path).split("/", 1)[0] or "")
    ]
    _delete_quietly(files)
    if is_local(root):
        local = root.removeprefix("file://")
        for folder, _, _ in sorted(os.walk(local), key=lambda item: -len(item[0])):
            with contextlib.suppress(OSError):  # not empty: what is not ours stays
                os.rmdir(folder)


def prepare_output(
    directory: str, *, overwrite: bool, job: dict, layout: OutputLayout | None = None
) -> StagedOutput:
    """Take ``directory`` for a new run: lock it, check what it holds, mark it as started.

    Args:
        directory: where the stage publishes.
        overwrite: replace a complete earlier output, and write next to files we did not write
            (they are left alone, with a warning).
        job: what the ``_STARTED`` marker and the lock record (command, argv).
        layout: the names the stage writes (what counts as ours); default: none but markers.

    Returns:
        The run's :class:`StagedOutput`; write below its ``attempt``, then ``commit``.

    Raises:
        OutputExistsError: files we did not write, or a complete output, and no ``overwrite``.
        OutputLockedError: another live run holds the directory.
    """
    layout = layout or OutputLayout()
    foreign = sorted(name for name in _sizes(directory) if not layout.owns(name))
    if foreign and not overwrite:
        raise OutputExistsError(
            f"{directory} holds files this stage did not write (first: "
            f"{join(directory, foreign[0])}); pass --overwrite to write next to them (they are "
            "kept), or choose another output directory"
        )
    run_id = uuid.uuid4().hex[:12]
    holder = _holder(run_id, job)
    if is_local(directory):
        os.makedirs(directory.removeprefix("file://"), exist_ok=True)  # two runs may race here
    elif not FileSystems.exists(directory):
        FileSystems.mkdirs(directory)
    lock = _take_lock(directory)
    try:
        _check_and_clear(directory, layout, overwrite=overwrite)
        if foreign:
            logger.warning(
                "%s holds %d file(s) this stage did not write (first: %s); they are left as "
                "they are",
                directory,
                len(foreign),
                foreign[0],
            )
        write_json(join(directory, STARTED), holder)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return StagedOutput(directory, run_id, layout, lock)


def _check_and_clear(directory: str, layout: OutputLayout, *, overwrite: bool) -> None:
    """Refuse a complete or unmarked output without ``overwrite``; clear a killed run's remains."""
    files = _sizes(directory)
    ours = [name for name in files if layout.owns(name)]
    if not ours:
        return
    _restore_previous(directory, _read_json(join(directory, MANIFEST)))
    files = _sizes(directory)
    complete = MANIFEST in files
    killed = _started_run(directory)
    if not overwrite and (complete or killed is None):
        if complete:
            what = "a complete output"
        else:
            first = sorted(name for name in ours if not _is_marker(name)) or sorted(ours)
            what = f"files but no run of ours to resume (first: {join(directory, first[0])})"
        raise OutputExistsError(
            f"{directory} already holds {what}; pass --overwrite to replace it, or choose "
            "another output directory"
        )
    previous = _read_json(join(directory, MANIFEST))
    listed = set(_listed(previous))
    if previous is not None and "commit" not in previous:  # written before manifests listed
        listed = {name for name in files if layout.owns(name) and not _is_marker(name)}
    # Remains of killed runs: attempt areas, and parts moved in an unfinished commit.
    leftovers = [
        join(directory, name)
        for name in files
        if layout.owns(name) and not _is_marker(name) and name not in listed
    ]
    temporaries = [join(directory, name) for name in files if name.startswith(f".{MANIFEST}.")]
    _delete_quietly(leftovers + temporaries)
    _clear_attempts(directory)


def write_manifest(directory: str, manifest: dict) -> None:
    """Write ``_manifest.json`` so that it appears whole or not at all.

    Locally: a temporary file in the same folder, flushed to disk, renamed over the manifest (a
    full disk fails the write and leaves the previous manifest). On object stores: one object
    write, which is complete or absent.
    """
    path = join(directory, MANIFEST)
    data = (json.dumps(manifest, indent=2, default=str) + "\n").encode("utf-8")
    if not is_local(path):
        with FileSystems.create(path, mime_type="application/json") as handle:
            handle.write(data)
        return
    local = directory.removeprefix("file://")
    handle, temporary = tempfile.mkstemp(prefix=f".{MANIFEST}.", suffix=".tmp", dir=local)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the other outputs are not
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_json(path: str, value: dict) -> None:
    """Write JSON to any Beam filesystem (one object write: complete or absent on GCS/S3)."""
    with FileSystems.create(path, mime_type="application/json") as handle:
        handle.write((json.dumps(value, indent=2, default=str) + "\n").encode("utf-8"))


def read_manifest(directory: str, *, verify: bool = True) -> dict:
    """The manifest of a complete output directory, checked against the files beside it.

    Args:
        directory: a stage's output directory.
        verify: check that every file the manifest lists is there with its size, and that no
            dataset folder holds a part file the manifest does not list.

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
        verify_files(directory, manifest)
    return manifest


def verify_files(directory: str, manifest: dict) -> None:
    """Refuse a folder whose files disagree with the manifest's ``commit`` list, naming the file.

    Every listed file must be there with its size, and a dataset folder may hold no Parquet
    file the manifest does not list (a Parquet reader of the folder would read it). A manifest
    without a ``commit`` section (written by an earlier version) is not checked.
    """
    commit = manifest.get("commit")
    if not isinstance(commit, dict):
        return
    sizes = _sizes(directory)
    listed = {}
    for entry in commit.get("files", []):
        listed[entry["path"]] = entry
        actual = sizes.get(entry["path"])
        if actual is None:
            raise CorruptOutputError(
                f"{join(directory, entry['path'])} is listed in {MANIFEST} but missing; the "
                "output is damaged; rerun the job that wrote it with --overwrite"
            )
        if actual != entry["bytes"]:
            raise CorruptOutputError(
                f"{join(directory, entry['path'])} is {actual} bytes but {MANIFEST} says "
                f"{entry['bytes']}: it was truncated or replaced; rerun the job that wrote it "
                "with --overwrite"
            )
    datasets = set(commit.get("datasets", []))
    for name in sorted(sizes):
        folder, _, base = name.rpartition("/")
        stray = base.endswith(".parquet") and not base.startswith(("_", "."))
        if folder in datasets and name not in listed and stray:
            raise CorruptOutputError(
                f"{join(directory, name)} is not listed in {MANIFEST}: it was left by a run that "
                "did not finish, or added by hand; rerun the job (it clears its own remains) or "
                "remove the file"
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
