"""Beam's ``FileSystems`` for every path, with plain local paths served here without Beam.

Importing anything from ``apache_beam`` imports the whole package (about a second and a half of
CPU), which a stage that runs in the launcher itself (``sbert pairs --method exact`` on a local
runner) would pay only to list, read and rename local files. :class:`FileSystems` has the
methods of ``apache_beam.io.filesystems.FileSystems`` that this project calls, with the same
arguments and results: a path without a scheme (``/data/x``, ``out/x``) is handled with ``os``
the way Beam's ``LocalFileSystem`` handles it; any other (``gs://``, ``s3://``, ``hdfs://``,
``file://``), a compressed file, a pattern with ``?`` or ``[`` and every error go to Beam's own
``FileSystems``, imported then, so remote runners and the error types are Beam's as before.

Example:
    >>> from pipelines.io.filesystems import FileSystems
    >>> [m.path for m in FileSystems.match(["out/part-*.parquet"])[0].metadata_list]
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO


class CompressionTypes:
    """The values of ``apache_beam.io.filesystem.CompressionTypes`` used here (plain strings,
    which Beam's filesystems compare by value)."""

    AUTO = "auto"
    UNCOMPRESSED = "uncompressed"


# Beam's FileSystems.URI_SCHEMA_PATTERN: a path that names a scheme is not ours to serve.
_SCHEME = re.compile(r"(?P<scheme>[a-zA-Z][-a-zA-Z0-9+.]*)://.*")
# Suffixes Beam reads as compressed with CompressionTypes.AUTO (detect_compression_type).
_COMPRESSED_SUFFIXES = (".bz2", ".deflate", ".gz", ".zst", ".zstd", ".xz", ".lzma")
_GLOB = re.compile(r"[*?\[]")
# The wildcards only Beam's own match implements (``*`` and ``**`` are matched here).
_BEAM_WILDCARDS = re.compile(r"[?\[]")


@dataclass(frozen=True)
class FileMetadata:
    """What Beam's ``FileMetadata`` holds for a local file."""

    path: str
    size_in_bytes: int
    last_updated_in_seconds: float = 0.0


@dataclass(frozen=True)
class MatchResult:
    """What Beam's ``MatchResult`` holds: the pattern and the files it matched."""

    pattern: str
    metadata_list: list[FileMetadata]


def _beam():
    """Beam's ``FileSystems`` (imported on first use: it loads all of Beam)."""
    from apache_beam.io.filesystems import FileSystems as BeamFileSystems

    return BeamFileSystems


def _plain_local(path: str) -> bool:
    """A path without a scheme, which Beam would give to its ``LocalFileSystem``."""
    return _SCHEME.match(path.strip()) is None


def _uncompressed(path: str, compression_type: str) -> bool:
    """Whether Beam would open ``path`` without a decompressor."""
    if compression_type == CompressionTypes.UNCOMPRESSED:
        return True
    return compression_type == CompressionTypes.AUTO and not path.lower().endswith(
        _COMPRESSED_SUFFIXES
    )


def _locally_then_beam(
    count: int, local: Callable[[int], bool], rest_to_beam: Callable[[int], None]
) -> None:
    """Item by item, ``local(i)`` (False: not ours to serve); from the first item that is not,
    or whose local call fails, that item and all after it go to Beam in one call, so Beam
    raises its own error for them."""
    for index in range(count):
        try:
            if local(index):
                continue
        except OSError:
            pass
        rest_to_beam(index)
        return


def _pattern_regex(pattern: str) -> re.Pattern:
    """Beam's pattern syntax for ``*`` only: ``*`` is ``[^/\\\\]*`` and ``**`` is ``.*``."""
    parts = []
    for piece in re.split(r"(\*\*|\*)", pattern):
        if piece == "**":
            parts.append(".*")
        elif piece == "*":
            parts.append(r"[^/\\]*")
        else:
            parts.append(re.escape(piece))
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def _match_local(pattern: str) -> MatchResult:
    """Beam's ``FileSystem.match`` of one local pattern whose only wildcard is ``*``."""
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    prefix = pattern.split("*", 1)[0]
    if prefix == pattern:  # no wildcard: the path itself, if it exists
        found = [_metadata(pattern)] if os.path.exists(pattern) else []
        return MatchResult(pattern, found)
    # Beam lists the directory of the part before the first wildcard, recursively.
    directory = os.path.dirname(prefix)
    if not os.path.exists(directory):
        return MatchResult(pattern, [])
    regex = _pattern_regex(pattern)
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            if regex.match(path):
                try:
                    found.append(_metadata(path))
                except OSError:  # a file removed meanwhile, as Beam skips it
                    continue
    return MatchResult(pattern, found)


def _metadata(path: str) -> FileMetadata:
    return FileMetadata(path, os.path.getsize(path), os.path.getmtime(path))


class FileSystems:
    """``apache_beam.io.filesystems.FileSystems``, served locally where Beam is not needed."""

    @staticmethod
    def join(basepath: str, *paths: str) -> str:
        """``basepath`` and ``paths`` joined with the separator of ``basepath``'s filesystem."""
        if _plain_local(basepath):
            return os.path.join(basepath, *paths)
        return _beam().join(basepath, *paths)

    @staticmethod
    def exists(path: str) -> bool:
        """Whether ``path`` (a file or a directory) exists."""
        if _plain_local(path):
            return os.path.exists(path)
        return _beam().exists(path)

    @staticmethod
    def match(patterns: Sequence[str], limits: Sequence[int | None] | None = None) -> list:
        """One match result per pattern (``*`` within a path segment, ``**`` across them)."""
        ours = all(_plain_local(p) and not _BEAM_WILDCARDS.search(p) for p in patterns)
        if limits is None and ours:
            try:
                return [_match_local(pattern) for pattern in patterns]
            except OSError:
                pass  # Beam's own match raises its error for this pattern
        return _beam().match(list(patterns), limits)

    @staticmethod
    def open(
        path: str,
        mime_type: str = "application/octet-stream",
        compression_type: str = CompressionTypes.AUTO,
    ) -> BinaryIO:
        """A read handle of ``path`` (decompressing by suffix with ``AUTO``, as Beam does)."""
        if _plain_local(path) and _uncompressed(path, compression_type) and os.path.isfile(path):
            return open(path, "rb")  # the caller closes it, as it closes Beam's handle
        return _beam().open(path, mime_type, compression_type)

    @staticmethod
    def create(
        path: str,
        mime_type: str = "application/octet-stream",
        compression_type: str = CompressionTypes.AUTO,
    ) -> BinaryIO:
        """A write handle of ``path``; the folders above it are made if missing."""
        if _plain_local(path) and _uncompressed(path, compression_type):
            try:
                directory = os.path.dirname(path)
                if directory:
                    os.makedirs(directory, exist_ok=True)
                return open(path, "wb")  # the caller closes it
            except OSError:
                pass  # Beam's own create raises its error for this path
        return _beam().create(path, mime_type, compression_type)

    @staticmethod
    def delete(paths: Sequence[str]) -> None:
        """Delete files, and directories with everything in them."""

        def delete_local(index: int) -> bool:
            path = paths[index]
            if not (_plain_local(path) and not _GLOB.search(path) and os.path.exists(path)):
                return False
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
            return True

        _locally_then_beam(
            len(paths), delete_local, lambda index: _beam().delete(list(paths[index:]))
        )

    @staticmethod
    def rename(sources: Sequence[str], destinations: Sequence[str]) -> None:
        """Rename each of ``sources`` to the destination at the same place."""
        if len(sources) != len(destinations):
            raise ValueError("sources and destinations should be equal in length")

        def rename_local(index: int) -> bool:
            source, destination = sources[index], destinations[index]
            if not (_plain_local(source) and _plain_local(destination)):
                return False
            os.rename(source, destination)
            return True

        _locally_then_beam(
            len(sources),
            rename_local,
            lambda index: _beam().rename(list(sources[index:]), list(destinations[index:])),
        )

    @staticmethod
    def mkdirs(path: str) -> None:
        """Make the directory ``path`` and those above it (an error if it exists)."""
        if _plain_local(path) and not os.path.exists(path):
            try:
                os.makedirs(path)
                return
            except OSError:
                pass  # Beam's own mkdirs raises its error for this path
        _beam().mkdirs(path)
