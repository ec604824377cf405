"""One run's hold on an output directory: the lock, the attempt area, and the commit.

The life of a run and what readers see are described in :mod:`sbert_pipeline.io.output_dir` (the
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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import xxhash
from sbert_pipeline.io import output_dir, ownership
from sbert_pipeline.io.atomic import is_local_path, replace, write_json_replacing
from sbert_pipeline.io.content_checks import checking_contents
from sbert_pipeline.io.filesystems import CompressionTypes, FileSystems
from sbert_pipeline.io.output_dir import (
    ATTEMPTS,
    MANIFEST,
    PREVIOUS,
    STARTED,
    CorruptOutputError,
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
from sbert_pipeline.io.output_names import refuse_output_folder
from sbert_pipeline.io.ownership import Survey, committed_run

logger = logging.getLogger(__name__)

_CHUNK = 1 << 22


@dataclass
class DirectoryLock:
    """An exclusive ``flock`` on a directory itself, held while the descriptor is open.

    Locking the directory (not a lock file in it) leaves no file behind and cannot race with a
    lock file being removed; the kernel drops the lock when the process dies, even by SIGKILL.
    """

    fd: int

    def release(self) -> None:
        """Drop the lock (again: nothing)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def holder_record(run_id: str, job: dict) -> dict:
    """What a ``_STARTED`` marker says about the run holding a folder: its id, pid, host and
    start time, and ``job`` (command, argv); a refused run quotes it (:func:`take_lock`)."""
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


def take_lock(directory: str) -> DirectoryLock | None:
    """Lock ``directory`` for this run (local disks); refuse if a live run holds it, describing
    that run from the ``_STARTED`` marker in the folder (see :func:`holder_record`).

    Returns None where the filesystem has no such locks (object stores; some network mounts).
    """
    if not is_local_path(directory):
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
    return DirectoryLock(fd)


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
    _lock: DirectoryLock | None = None

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

    def commit(self, manifest: dict, *, keep: Sequence[Mapping] = ()) -> dict:
        """Publish the attempt: move its files, write the manifest, drop the previous run's files.

        Before anything moves, the commit writes its record (``_attempts/<run id>/_commit.json``:
        the names it publishes and the previous manifest's files it replaces), so that the next
        run knows, by record, what a kill in the middle of it left.

        Args:
            manifest: the stage's manifest; a ``commit`` section (run id, datasets, and every
                file with bytes, sha256 and Parquet rows) is added to it.
            keep: entries of the published manifest's ``commit.files`` to carry over into the
                new version as they are (an incremental run's unchanged parts): each must still
                be listed there and be on disk with its size and digest; it is listed again with
                the same entry and not deleted.

        Returns:
            The manifest written.

        Raises:
            OutputLockedError: another run took the folder over; nothing was published.
            OutputExistsError: a link appeared at a name the commit writes; nothing was
                published.
            CorruptOutputError: a file to keep is not listed by the published manifest, is
                missing, has another size or other bytes; nothing was published.
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
        kept_entries = self._kept_entries(previous, keep, {final for _, final, _ in moves})
        self._refuse_links([MANIFEST, STARTED, *(final for _, final, _ in moves)])
        entries = [_describe_file(self.path(source), final, size) for source, final, size in moves]
        entries = sorted([*entries, *kept_entries], key=lambda entry: entry["path"])
        written = {
            **manifest,
            "commit": {
                "run_id": self.run_id,
                "datasets": list(self.layout.datasets),
                "files": entries,
            },
        }
        replaced = ownership.listed_files(previous)
        record = {"run_id": self.run_id, "publishes": [final for _, final, _ in moves]}
        write_json_replacing(self.path(ownership.COMMIT_RECORD), {**record, "replaced": replaced})
        self._publish([(source, final) for source, final, _ in moves], written)
        kept = {entry["path"] for entry in entries}
        ownership.delete_owned(self.directory, [name for name in replaced if name not in kept])
        output_dir.remove_empty_folders(self.directory, self.layout.legacy_datasets)
        ownership.clear_attempt(self.directory, self.run_id)
        delete_quietly([join(self.directory, STARTED)])  # last: until here it records the run
        self.release()
        return written

    def _kept_entries(
        self, previous: dict | None, keep: Sequence[Mapping], moved: set[str]
    ) -> list[dict]:
        """The published files to carry over, checked: listed by the published manifest with
        the same entry, on disk with that size and digest, no link on their path, not replaced
        by a file this run moves in."""
        listed = {
            entry["path"]: entry
            for entry in ((previous or {}).get("commit") or {}).get("files", [])
            if isinstance(entry, dict) and isinstance(entry.get("path"), str)
        }
        sizes = file_sizes(self.directory) if keep else {}
        kept = []
        for entry in keep:
            path = entry.get("path")
            where = join(self.directory, str(path))
            if listed.get(path) != dict(entry) or path in moved:
                raise CorruptOutputError(
                    f"{where} is to be kept, but {MANIFEST} does not list it with that entry "
                    "(another run published meanwhile?); this run published nothing"
                )
            if sizes.get(path) != entry.get("bytes") or ownership.is_link_on_path(
                self.directory, path
            ):
                raise CorruptOutputError(
                    f"{where} is to be kept, but it is missing, a link, or not of the "
                    f"{entry.get('bytes')} bytes {MANIFEST} lists; this run published nothing"
                )
            kept.append(dict(entry))
        # Their bytes too (a file rewritten in place keeps its size): hashed unless the plan's
        # read_manifest already matched them unchanged in this process; --no-verify skips it.
        try:
            output_dir.verify_files(
                self.directory, {"commit": {"files": kept}}, contents=checking_contents()
            )
        except CorruptOutputError as err:
            raise CorruptOutputError(
                f"a file to be kept no longer holds what {MANIFEST} lists ({err}); this run "
                "published nothing"
            ) from None
        return kept

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
        next run puts it back after a kill (see ``ownership.restore_previous``).
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


def _describe_file(path: str, final: str, size: int) -> dict:
    """A manifest entry: bytes, sha256 and xxh3_128 (one read for both), Parquet rows.

    Readers check the xxh3_128 (about ten times faster than sha256; see
    :mod:`sbert_pipeline.io.content_checks`); the sha256 stays for tools that compare files by it.
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


def prepare_output(
    directory: str,
    *,
    overwrite: bool,
    job: dict,
    layout: OutputLayout | None = None,
    replace_kind: str | None = None,
    adopt: Callable[[str], Collection[str]] | None = None,
) -> StagedOutput:
    """Take ``directory`` for a new run: lock it, check what it holds, mark it as started.

    Nothing in the folder changes unless the run goes on: the checks read the folder (see
    :mod:`sbert_pipeline.io.ownership`), and only then, holding the lock, the run clears what a
    killed run of ours left (by record) and writes its ``_STARTED`` marker.

    Args:
        directory: where the stage publishes.
        overwrite: replace a complete earlier output of ours, and write next to files we did
            not write (they are left alone, with a warning) unless they are in the way.
        job: what the ``_STARTED`` marker and the lock record (command, argv).
        layout: the names the stage writes; default: none but markers.
        replace_kind: also replace, without ``overwrite``, a complete output of ours whose
            manifest has this ``kind`` (an incremental run's previous version) when the folder
            holds no foreign file; anything else is refused as without it.
        adopt: given the attempt area of a killed run of ours (the run ``_STARTED`` names),
            the names in it (relative) that this run takes over instead of clearing them (a
            resumed run's finished work); when it names any, this run goes on under the killed
            run's id and everything else of that run is cleared as usual. Called holding the
            lock.

    Returns:
        The run's :class:`StagedOutput`; write below its ``attempt``, then ``commit``.

    Raises:
        OutputExistsError: a link at one of our names, files we did not write in our way,
            files we did not write or a complete output without ``overwrite``.
        ValueError: a folder no stage may take, from its name alone (the filesystem root, the
            home folder, a name with glob characters; see :mod:`sbert_pipeline.io.output_names`).
        OutputLockedError: another live run holds the directory.
    """
    layout = layout or OutputLayout()
    refuse_output_folder(directory, "output folder")  # the root, $HOME: before any listing
    found = ownership.survey(directory, layout)
    ownership.refuse_takeover(found, layout, overwrite=_may_replace(found, overwrite, replace_kind))
    run_id = uuid.uuid4().hex[:12]
    if is_local_path(directory):
        os.makedirs(directory.removeprefix("file://"), exist_ok=True)  # two runs may race here
    elif not FileSystems.exists(directory):
        FileSystems.mkdirs(directory)
    lock = take_lock(directory)
    try:
        found = ownership.survey(directory, layout)  # again: it may have changed before the lock
        may = _may_replace(found, overwrite, replace_kind)
        ownership.refuse_takeover(found, layout, overwrite=may)
        adopted = _adopted(found, adopt)
        if adopted:
            run_id = found.started or run_id
        _clear_remains(found, layout, {run_id: adopted})
        if found.foreign:
            logger.warning(
                "%s holds %d file(s) this stage did not write (%s); they are left as they are",
                directory,
                len(found.foreign),
                ownership.describe(found.foreign),
            )
        write_json_replacing(join(directory, STARTED), holder_record(run_id, job))
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return StagedOutput(directory, run_id, layout, lock)


def _may_replace(found: Survey, overwrite: bool, replace_kind: str | None) -> bool:
    """``overwrite``, or a folder holding only our complete output of ``replace_kind``."""
    ours = found.manifest is not None and found.manifest.get("kind") == replace_kind
    return overwrite or (replace_kind is not None and ours and not found.foreign)


def _adopted(found: Survey, adopt: Callable[[str], Collection[str]] | None) -> set[str]:
    """What this run takes over from the killed run's attempt area (see ``prepare_output``):
    only plain files inside it, with no link on their path."""
    killed = found.started
    if adopt is None or killed is None or killed == committed_run(found.manifest):
        return set()
    area = f"{ATTEMPTS}/{killed}/"
    present = {name.removeprefix(area) for name in found.entries if name.startswith(area)}
    names = {name for name in adopt(join(found.directory, ATTEMPTS, killed)) if name in present}
    return {
        name
        for name in names
        if ownership.is_inside(name) and not ownership.is_link_on_path(found.directory, area + name)
    }


def _clear_remains(
    found: Survey, layout: OutputLayout, adopted: Mapping[str, Collection[str]] | None = None
) -> None:
    """Clear what a killed run of ours left (only what our records list), keeping the output.

    Called only by a run that holds the folder and goes on: files a killed commit had set
    aside go back, the files it had moved in (or, if its manifest is in, the previous files it
    had not yet deleted) go, and the recorded attempt areas are deleted, except the files
    ``adopted`` names (``{run id: names inside its attempt area}``) that this run takes over.
    """
    adopted = {run: set(names) for run, names in (adopted or {}).items() if names}
    ownership.restore_previous(found)
    found = ownership.survey(found.directory, layout)
    listed = found.listed
    leftovers = [
        name
        for name in found.ours
        if name not in listed
        and name not in (MANIFEST, STARTED)
        and not name.startswith(f"{ATTEMPTS}/")
    ]
    ownership.delete_owned(found.directory, sorted(leftovers))
    for run in found.runs:
        if run in adopted:
            area = f"{ATTEMPTS}/{run}/"
            others = [
                name
                for name in found.entries
                if name.startswith(area) and name.removeprefix(area) not in adopted[run]
            ]
            ownership.delete_owned(found.directory, others)
        else:
            ownership.clear_attempt(found.directory, run)
