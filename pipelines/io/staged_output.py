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
import re
import socket
import time
import uuid
from dataclasses import dataclass

from pipelines.io import output_dir
from pipelines.io.atomic import is_local, replace
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
    is_marker,
    join,
    list_files,
    listed_paths,
    read_json_or_none,
    relative_to,
    write_json,
)

logger = logging.getLogger(__name__)

_CHUNK = 1 << 22
_RUN_ID = re.compile(r"^[0-9a-f]{12}$")


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


def _started_run(directory: str) -> str | None:
    """The run id in the top-level ``_STARTED`` marker, if it is one of ours."""
    marker = read_json_or_none(join(directory, STARTED))
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
        previous = read_json_or_none(join(self.directory, MANIFEST))
        moves = []
        for relative, size in sorted(file_sizes(self.attempt).items()):
            if not self.layout.publishes(relative):
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
        stale = [name for name in listed_paths(previous) if name not in kept]
        if previous is not None and "commit" not in previous:  # written before manifests listed
            stale = [
                name
                for name in file_sizes(self.directory)
                if name not in kept and self.layout.owns(name) and not is_marker(name)
            ]
        delete_quietly([join(self.directory, name) for name in stale])
        output_dir.remove_empty_folders(self.directory, self.layout.legacy_datasets)
        delete_quietly([join(self.directory, STARTED)])
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


def _restore_previous(directory: str, manifest: dict | None) -> None:
    """Put back the files a killed commit had set aside, unless that commit's manifest is in.

    Only ``_attempts/<run id>/_previous/`` areas are read; what they hold was the previous
    output's, moved there by ``StagedOutput._publish``.
    """
    committed = (manifest or {}).get("commit", {}).get("run_id") if manifest else None
    root = join(directory, ATTEMPTS)
    for path in list_files(root):
        run_id, _, rest = relative_to(root, path).partition("/")
        if not _RUN_ID.match(run_id) or run_id == committed:
            continue
        if rest.startswith(f"{PREVIOUS}/"):
            replace(path, join(directory, rest.removeprefix(f"{PREVIOUS}/")))


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


def _clear_attempts(directory: str) -> None:
    """Delete every file of ``_attempts/<run id>/`` areas (ours by name), then the empty folders."""
    root = join(directory, ATTEMPTS)
    files = [
        path
        for path in list_files(root)
        if _RUN_ID.match(relative_to(root, path).split("/", 1)[0] or "")
    ]
    delete_quietly(files)
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
    foreign = sorted(name for name in file_sizes(directory) if not layout.owns(name))
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
    files = file_sizes(directory)
    ours = [name for name in files if layout.owns(name)]
    if not ours:
        return
    _restore_previous(directory, read_json_or_none(join(directory, MANIFEST)))
    files = file_sizes(directory)
    complete = MANIFEST in files
    killed = _started_run(directory)
    if not overwrite and (complete or killed is None):
        if complete:
            what = "a complete output"
        else:
            first = sorted(name for name in ours if not is_marker(name)) or sorted(ours)
            what = f"files but no run of ours to resume (first: {join(directory, first[0])})"
        raise OutputExistsError(
            f"{directory} already holds {what}; pass --overwrite to replace it, or choose "
            "another output directory"
        )
    previous = read_json_or_none(join(directory, MANIFEST))
    listed = set(listed_paths(previous))
    if previous is not None and "commit" not in previous:  # written before manifests listed
        listed = {name for name in files if layout.owns(name) and not is_marker(name)}
    # Remains of killed runs: attempt areas, and parts moved in an unfinished commit.
    leftovers = [
        join(directory, name)
        for name in files
        if layout.owns(name) and not is_marker(name) and name not in listed
    ]
    temporaries = [join(directory, name) for name in files if name.startswith(f".{MANIFEST}.")]
    delete_quietly(leftovers + temporaries)
    _clear_attempts(directory)
