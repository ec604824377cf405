"""Whether published files still hold what their manifest recorded: a digest of each file.

A stage that reads a published folder opens it through
:func:`sbert_pipeline.io.output_dir.read_manifest`, which compares every file the manifest lists
with its recorded digest (the commit wrote it; :mod:`sbert_pipeline.io.staged_output`) before the
stage uses any of them. A file changed in place, even with its size kept, is refused rather than
read.

The digest is the entry's ``xxh3_128`` (XXH3, 128 bits), which the commit records beside the
sha256; manifests written before it carry only the sha256, which is checked instead. XXH3 is not
cryptographic, and need not be: the manifest is not signed, so no digest in it could stop
someone who also rewrites the manifest; what is caught is damage and careless edits, for which a
128-bit digest misses one change in 2^128.

Cost: XXH3 runs at about 12 GB/s per core here, sha256 at 1.5 GB/s (with the SHA CPU
extensions); both and the file reads release Python's lock, so files are hashed in parallel
threads, one per core, largest first, each read in 1 MiB chunks into one reused buffer.
``benchmarks/verify_reads.py`` measures the check against the cheapest stage that reads an
embeddings folder (``sbert cluster --k 100``) on 1M x 384 float32 vectors (1.55 GB).

A file that matched is remembered for the life of the process by its identity (path, size,
modification time and the expected digest), so a folder opened again in the same process (``sbert
run`` reads the embeddings in several stages and in its report) is hashed once; a file written
since has another modification time and is hashed again.

:func:`content_checks` turns the check off for a block (``--no-verify``): the sizes and the
listing are still checked, but a file changed in place with its size kept is then read as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass

import xxhash
from sbert_pipeline.io.atomic import is_local_path
from sbert_pipeline.io.filesystems import CompressionTypes, FileSystems

_BUFFER = 1 << 20  # bytes per read: per-call costs vanish, and it stays in the CPU's cache

_CHECKING: ContextVar[bool] = ContextVar("checking_contents", default=True)


@dataclass(frozen=True)
class ListedFile:
    """A file a manifest lists, as found on disk: where, how big, when last written, and the
    digest the manifest expects (``algorithm``: ``xxh3_128`` or ``sha256``)."""

    path: str
    size: int
    modified: float
    digest: str
    algorithm: str = "xxh3_128"


ALGORITHMS = ("xxh3_128", "sha256")  # the digests a manifest entry may carry, preferred first


def expected_digest(entry: dict) -> tuple[str, str] | None:
    """``(algorithm, digest)`` to check a manifest entry by: its xxh3_128, else its sha256;
    None when it records neither (an entry of an earlier version)."""
    for algorithm in ALGORITHMS:
        if isinstance(entry.get(algorithm), str):
            return algorithm, entry[algorithm]
    return None


_matched: set[ListedFile] = set()
_matched_lock = threading.Lock()


@contextlib.contextmanager
def content_checks(enabled: bool) -> Iterator[None]:
    """Within the block (and this thread), whether readers compare file contents with the
    manifest (on by default; off is ``--no-verify``)."""
    token = _CHECKING.set(enabled)
    try:
        yield
    finally:
        _CHECKING.reset(token)


def checking_contents() -> bool:
    """Whether readers compare file contents with the manifest here (see :func:`content_checks`)."""
    return _CHECKING.get()


def changed_files(files: Sequence[ListedFile]) -> list[str]:
    """The paths of ``files`` whose content does not hash to their digest, in the given order.

    Files already found matching in this process, unchanged since, are not read again.
    """
    unknown = [entry for entry in files if entry not in _matched]
    if not unknown:
        return []
    digests = dict(zip(unknown, _digests(unknown), strict=True))
    matched = {entry for entry, digest in digests.items() if digest == entry.digest}
    with _matched_lock:
        _matched.update(matched)
    return [entry.path for entry in unknown if entry not in matched]


def file_digests(files: Sequence[tuple[str, int]]) -> list[str]:
    """The xxh3_128 of each ``(path, size)`` file's bytes as stored, in the given order.

    Nothing is remembered: every call reads every file, so a file rewritten in place with its
    size and modification time kept still gets its new digest.
    """
    return _digests([ListedFile(path, size, 0.0, "") for path, size in files])


def _digests(files: Sequence[ListedFile]) -> list[str]:
    """:func:`digest_of` each file, in the given order: hashed in threads, largest first."""
    if not files:
        return []
    largest_first = sorted(range(len(files)), key=lambda i: -files[i].size)
    workers = min(len(files), os.cpu_count() or 1)
    with ThreadPoolExecutor(workers, thread_name_prefix="digest") as pool:
        found = pool.map(digest_of, [files[i] for i in largest_first])
        by_position = dict(zip(largest_first, found, strict=True))
    return [by_position[i] for i in range(len(files))]


def forget_matches() -> None:
    """Forget which files matched, so that the next check hashes them again (measurements)."""
    with _matched_lock:
        _matched.clear()


def digest_of(entry: ListedFile) -> str:
    """The digest (``entry.algorithm``) of a file's bytes, as the commit computed it."""
    hasher = xxhash.xxh3_128() if entry.algorithm == "xxh3_128" else hashlib.sha256()
    if is_local_path(entry.path):
        # Read into one reused buffer: no allocation per chunk, and a chunk that stays in the
        # CPU's cache while it is hashed. (A memory map is no faster, and a file truncated
        # while mapped kills the process with SIGBUS instead of raising.)
        buffer = memoryview(bytearray(_BUFFER))
        with open(entry.path.removeprefix("file://"), "rb", buffering=0) as handle:
            while size := handle.readinto(buffer):
                hasher.update(buffer[:size])
        return hasher.hexdigest()
    with FileSystems.open(entry.path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        while chunk := handle.read(_BUFFER):
            hasher.update(chunk)
    return hasher.hexdigest()
