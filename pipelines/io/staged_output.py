"""One run's hold on an output directory: the lock, the attempt area, and the commit.

The life of a run and what readers see are described in :mod:`pipelines.io.output_dir` (the
folder contract); this module is the writer's side of it: ``prepare_output`` locks and marks the
folder and clears a killed run's remains, ``StagedOutput.commit`` publishes the attempt.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

import xxhash

from pipelines.io import output_dir, ownership
from pipelines.io.atomic import is_local, replace, write_json_replacing
from pipelines.io.content_checks import ListedFile, digest_of, expected_digest
from pipelines.io.filesystems import CompressionTypes, FileSystems
from pipelines.io.output_dir import (
    ATTEMPTS,
    MANIFEST,
    PREVIOUS,
    STARTED,
    OutputExistsError,
    OutputLayout,
    OutputLockedError,
    delete_quietly,
    file_sizes,
    join,
    list_files,
    read_json_or_none,
    relative_to,
)
from pipelines.io.output_names import refuse_output_folder
from pipelines.io.ownership import Survey, committed_run

logger = logging.getLogger(__name__)

_CHUNK = 1 << 22


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
        other = read_json_or_none(join(directory, STARTED)) or {}
        raise OutputLockedError(
            f"{directory} is in use by another run ({_describe_holder(other)}); wait for it to "
            "finish or write to another output directory"
        ) from None
    except OSError:
        os.close(fd)
        logger.warning("%s: this filesystem does not support locks; not locked", directory)
        return None
    return _Lock(fd)


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

    def __getstate__(self) -> dict:
        # A pipeline step that commits gets a copy without the lock: the descriptor means
        # nothing in a worker, and closing it there could drop the launcher's lock.
        return {**self.__dict__, "_lock": None}

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

    def committed_manifest(self) -> dict | None:
        """The published manifest if this run wrote it (a retried commit step finds it)."""
        manifest = read_json_or_none(join(self.directory, MANIFEST))
        commit = manifest.get("commit") if manifest else None
        ours = isinstance(commit, dict) and commit.get("run_id") == self.run_id
        return manifest if ours else None

    def resume(self) -> dict | None:
        """Before a commit that a runner may retry: this run's manifest if it is published;
        otherwise put back what an interrupted commit of this run had moved, so that the attempt
        area is whole again.

        A pipeline step that commits can be retried after its worker died inside the commit:
        the parts it had moved (their names carry this run id) go back to the attempt area, and
        files it had set aside in ``_previous/`` go back in place (this run's copy back to the
        attempt area first).
        """
        done = self.committed_manifest()
        if done is not None:
            return done
        marker = f"part-{self.run_id}-"
        for relative in file_sizes(self.directory):
            folder, _, name = relative.rpartition("/")
            if folder in self.layout.datasets and name.startswith(marker):
                source = f"part-{name.removeprefix(marker)}"
                source = f"{folder}/{source}" if folder else source
                replace(join(self.directory, relative), self.path(source))
        saved = self.path(PREVIOUS)
        for backup in list_files(saved):
            final = relative_to(saved, backup)
            target = join(self.directory, final)
            if FileSystems.exists(target):
                replace(target, self.path(final))
            replace(backup, target)
        return None

    def commit(self, manifest: dict) -> dict:
        """Publish the attempt: move its files, write the manifest, drop the previous run's files.

        Before anything moves, the commit writes its record (``_attempts/<run id>/_commit.json``:
        the names it publishes and the previous manifest's files it replaces), so that the next
        run knows, by record, what a kill in the middle of it left.

        Args:
            manifest: the stage's manifest; a ``commit`` section (run id, datasets, and every
                file with bytes, sha256 and Parquet rows) is added to it.

        Returns:
            The manifest written.

        Raises:
            OutputLockedError: another run took the folder over; nothing was published.
            OutputExistsError: a link appeared at a name the commit writes; nothing was
                published.
        """
        if ownership.started_run(self.directory) != self.run_id:
            raise OutputLockedError(
                f"{self.directory} was taken over by another run while this one ran; this run "
                "published nothing"
            )
        previous = read_json_or_none(join(self.directory, MANIFEST))
        moves = []
        for relative, size in sorted(file_sizes(self.attempt).items()):
            if not self.layout.publishes(relative):
                continue  # ledgers, retried writers' and runner temporaries stay behind
            moves.append((relative, self.final_name(relative), size))
        self._refuse_links([MANIFEST, STARTED, *(final for _, final, _ in moves)])
        entries = [_describe_file(self.path(source), final, size) for source, final, size in moves]
        written = {
            **manifest,
            "commit": {
                "run_id": self.run_id,
                "datasets": list(self.layout.datasets),
                "files": entries,
            },
        }
        replaced = ownership.listed_files(previous)
        record = {"run_id": self.run_id, "publishes": [e["path"] for e in entries]}
        write_json_replacing(self.path(ownership.COMMIT_RECORD), {**record, "replaced": replaced})
        self._publish([(source, final) for source, final, _ in moves], written)
        kept = {entry["path"] for entry in entries}
        _delete_owned(self.directory, [name for name in replaced if name not in kept])
        output_dir.remove_empty_folders(self.directory, self.layout.legacy_datasets)
        _clear_attempt(self.directory, self.run_id)
        delete_quietly([join(self.directory, STARTED)])  # last: until here it records the run
        self.release()
        return written

    def _refuse_links(self, names: list[str]) -> None:
        """Refuse to publish when a link sits on the path of a name the commit writes."""
        for name in names:
            linked = ownership.is_link_on_path(self.directory, name)
            if linked:
                raise OutputExistsError(
                    f"{join(self.directory, linked)} became a symbolic link while this run ran; "
                    "this run published nothing and never writes through a link; remove the link "
                    "and rerun"
                )

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
                    replace(target, backup)
                    saved.append((target, backup))
                replace(self.path(source), target)
                done.append((self.path(source), target))
            output_dir.write_manifest(self.directory, manifest)  # looked up late: tests swap it
        except BaseException:
            for source, target in reversed(done):
                with contextlib.suppress(OSError):
                    replace(target, source)
            for target, backup in saved:
                with contextlib.suppress(OSError):
                    replace(backup, target)
            raise


def _restore_previous(found: Survey) -> None:
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
    digest readers check (:func:`pipelines.io.content_checks.expected_digest`)."""
    expected = expected_digest(entry)
    found = FileSystems.match([path])[0].metadata_list if FileSystems.exists(path) else []
    if expected is None or len(found) != 1 or found[0].size_in_bytes != entry.get("bytes"):
        return False
    algorithm, digest = expected
    try:
        return digest_of(ListedFile(path, found[0].size_in_bytes, 0.0, digest, algorithm)) == digest
    except OSError:
        return False


def _describe_file(path: str, final: str, size: int) -> dict:
    """A manifest entry: bytes, sha256 and xxh3_128 (one read for both), Parquet rows.

    Readers check the xxh3_128 (about ten times faster than sha256; see
    :mod:`pipelines.io.content_checks`); the sha256 stays for tools that compare files by it.
    """
    hasher, fast = hashlib.sha256(), xxhash.xxh3_128()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
            fast.update(chunk)
    entry: dict = {
        "path": final,
        "bytes": size,
        "sha256": hasher.hexdigest(),
        "xxh3_128": fast.hexdigest(),
    }
    if final.endswith(".parquet"):
        import pyarrow.parquet as pq

        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            entry["rows"] = pq.ParquetFile(handle).metadata.num_rows
    return entry


def _clear_attempt(directory: str, run_id: str) -> None:
    """Delete one run's attempt area ``_attempts/<run id>/`` (ours by record), then
    ``_attempts/`` itself if nothing else is in it.

    Locally the walk never follows a link: a link found there (made after the folder was
    checked) is left as it is, and so is the folder holding it.
    """
    area = join(directory, ATTEMPTS, run_id)
    if not is_local(area):
        delete_quietly(list_files(area))
        return
    local = area.removeprefix("file://")
    if ownership.is_link_on_path(directory, f"{ATTEMPTS}/{run_id}") or not os.path.isdir(local):
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


def _delete_owned(directory: str, names: list[str]) -> None:
    """Delete files of ``directory`` that a record of ours lists, never through a link.

    A name with a link on its path, or that is not a plain file, is left as it is (the checks
    before the run refuse such folders; this guards what changed since).
    """
    for name in names:
        path = join(directory, name)
        if not is_local(directory):
            delete_quietly([path])
            continue
        if ownership.is_link_on_path(directory, name):
            continue
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
            if os.path.isfile(path.removeprefix("file://")):
                os.unlink(path.removeprefix("file://"))


def prepare_output(
    directory: str, *, overwrite: bool, job: dict, layout: OutputLayout | None = None
) -> StagedOutput:
    """Take ``directory`` for a new run: lock it, check what it holds, mark it as started.

    Nothing in the folder changes unless the run goes on: the checks read the folder (see
    :mod:`pipelines.io.ownership`), and only then, holding the lock, the run clears what a
    killed run of ours left (by record) and writes its ``_STARTED`` marker.

    Args:
        directory: where the stage publishes.
        overwrite: replace a complete earlier output of ours, and write next to files we did
            not write (they are left alone, with a warning) unless they are in the way.
        job: what the ``_STARTED`` marker and the lock record (command, argv).
        layout: the names the stage writes; default: none but markers.

    Returns:
        The run's :class:`StagedOutput`; write below its ``attempt``, then ``commit``.

    Raises:
        OutputExistsError: a link at one of our names, files we did not write in our way,
            files we did not write or a complete output without ``overwrite``.
        ValueError: a folder no stage may take, from its name alone (the filesystem root, the
            home folder, a name with glob characters; see :mod:`pipelines.io.output_names`).
        OutputLockedError: another live run holds the directory.
    """
    layout = layout or OutputLayout()
    refuse_output_folder(directory, "output folder")  # the root, $HOME: before any listing
    ownership.refuse_takeover(ownership.survey(directory, layout), layout, overwrite=overwrite)
    run_id = uuid.uuid4().hex[:12]
    holder = _holder(run_id, job)
    if is_local(directory):
        os.makedirs(directory.removeprefix("file://"), exist_ok=True)  # two runs may race here
    elif not FileSystems.exists(directory):
        FileSystems.mkdirs(directory)
    lock = _take_lock(directory)
    try:
        found = ownership.survey(directory, layout)  # again: it may have changed before the lock
        ownership.refuse_takeover(found, layout, overwrite=overwrite)
        _clear_remains(found, layout)
        if found.foreign:
            logger.warning(
                "%s holds %d file(s) this stage did not write (%s); they are left as they are",
                directory,
                len(found.foreign),
                ownership.describe(found.foreign),
            )
        write_json_replacing(join(directory, STARTED), holder)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return StagedOutput(directory, run_id, layout, lock)


def _clear_remains(found: Survey, layout: OutputLayout) -> None:
    """Clear what a killed run of ours left (only what our records list), keeping the output.

    Called only by a run that holds the folder and goes on: files a killed commit had set
    aside go back, the files it had moved in (or, if its manifest is in, the previous files it
    had not yet deleted) go, and the recorded attempt areas are deleted.
    """
    _restore_previous(found)
    found = ownership.survey(found.directory, layout)
    listed = found.listed
    leftovers = [
        name
        for name in found.ours
        if name not in listed
        and name not in (MANIFEST, STARTED)
        and not name.startswith(f"{ATTEMPTS}/")
    ]
    _delete_owned(found.directory, sorted(leftovers))
    for run in found.runs:
        _clear_attempt(found.directory, run)
