"""Beam's ``FileSystems`` for every path, with plain local paths served here without Beam.

Importing anything from ``apache_beam`` imports the whole package (about a second and a half of
CPU), which a stage that runs in the launcher itself (``sbert pairs --method exact`` on a local
runner) would pay only to list, read and rename local files. :class:`FileSystems` has the
methods of ``apache_beam.io.filesystems.FileSystems`` that this project calls, with the same
arguments and results: a path without a scheme (``/data/x``, ``out/x``) is handled with ``os``
the way Beam's ``LocalFileSystem`` handles it; any other (``gs://``, ``s3://``, ``hdfs://``,
``file://``), a compressed file and every error go to Beam's own ``FileSystems``, imported then,
so remote runners and the error types are Beam's as before.

Local file names may hold glob characters (``notes [v2].txt``), which Beam's local filesystem
would read as a pattern even where the caller names one file: its ``delete`` matches its
argument first, so deleting ``a[1].json`` fails with "No files found" (or deletes ``a1.json``).
Here a local path is never globbed against the caller's intent:

- ``delete``, ``rename``, ``open``, ``create`` and ``exists`` take a local path as written;
- ``match`` takes the leading folders of a local pattern that exist as written (``out [1]/**``
  lists the folder ``out [1]``), and its last name too when that exists and has no ``*``; only
  the rest is a pattern, with Beam's syntax (``*``, ``**``, ``?``, ``[...]``) except that ``*``
  also matches a backslash, which is an ordinary character in a POSIX file name.

Example:
    >>> from sbert_pipeline.io.filesystems import FileSystems
    >>> [m.path for m in FileSystems.match(["out/part-*.parquet"])[0].metadata_list]
"""

from __future__ import annotations

import errno
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
# Write flags of a local file: a link at the name makes the open fail instead of being followed.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
_GLOB = re.compile(r"[*?\[]")


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


def _pattern_regex(pattern: str) -> str:
    """Beam's ``FileSystem.translate_pattern`` for a local pattern, without its ``(?ms)`` and
    ``\\Z``: ``*`` is ``[^/]*``, ``**`` is ``.*``, ``?`` is ``.`` and ``[...]`` a class."""
    parts = []
    for piece in re.split(r"(\*\*|\*|\?|\[!?\]?[^]]*\])", pattern):
        if piece == "**":
            parts.append(".*")
        elif piece == "*":
            parts.append("[^/]*")
        elif piece == "?":
            parts.append(".")
        elif piece.startswith("[") and len(piece) > 1:
            inside = piece[1:-1].replace("\\", "\\\\")
            if inside.startswith("!"):
                inside = "^" + inside[1:]
            elif inside.startswith("^"):
                inside = "\\" + inside
            parts.append(f"[{inside}]")
        else:
            parts.append(re.escape(piece))
    return "".join(parts)


def _as_written(pattern: str) -> tuple[str, str]:
    """``(literal, rest)``: the leading part of a local pattern taken as written, and the rest.

    A folder that exists under its own name is that folder, glob characters and all; so is the
    last name when it exists and holds no ``*`` (a ``*`` there asks for a listing). The rest,
    from the first name with a glob character that does not exist as written, is a pattern.
    """
    if not _GLOB.search(pattern):
        return pattern, ""
    names = pattern.split("/")
    if "*" not in names[-1] and os.path.lexists(pattern):
        return pattern, ""
    taken = 0  # characters of the leading folders taken as written, each with its "/"
    for index, name in enumerate(names[:-1]):
        if _GLOB.search(name) and not os.path.isdir("/".join(names[: index + 1])):
            break
        taken += len(name) + 1
    return pattern[:taken], pattern[taken:]


def split_pattern(pattern: str) -> tuple[str, str]:
    """``(folder, rest)``: the folder a pattern lists, ending in ``/`` (``""`` for none), and
    the pattern below it; ``folder + rest == pattern``.

    Locally the folder is the leading folders that exist as written (see :meth:`FileSystems.match`);
    on other filesystems it ends before the first glob character, as Beam lists it.
    """
    literal = _as_written(pattern)[0] if _plain_local(pattern) else _GLOB.split(pattern, 1)[0]
    cut = literal.rfind("/") + 1
    return pattern[:cut], pattern[cut:]


def pattern_regex(folder: str, rest: str) -> re.Pattern:
    """The regex that :meth:`FileSystems.match` applies to local paths: ``folder`` as written,
    then the pattern ``rest`` (the two parts :func:`split_pattern` returns)."""
    return re.compile(re.escape(folder) + _pattern_regex(rest) + r"\Z", re.DOTALL)


def _match_local(pattern: str) -> MatchResult:
    """Beam's ``FileSystem.match`` of one local pattern, its existing folders taken as written."""
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    literal, rest = _as_written(pattern)
    if not rest:  # no wildcard: the path itself, if it exists
        found = [_metadata(pattern)] if os.path.exists(pattern) else []
        return MatchResult(pattern, found)
    # Beam lists the folder above the first wildcard, recursively (none for a relative pattern
    # whose first name is one).
    if not literal or not os.path.isdir(literal):
        return MatchResult(pattern, [])
    regex = pattern_regex(literal, rest)
    found = []
    for root, _, names in os.walk(literal):
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


def _delete_local(path: str) -> None:
    """Delete the file or folder ``path`` as written (FileNotFoundError if there is none)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"No files found to delete under: {path}")
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def _delete_error(path: str, err: OSError) -> OSError:
    """The error Beam's ``delete`` raises for ``path`` (a ``BeamIOError``)."""
    from apache_beam.io.filesystem import BeamIOError

    return BeamIOError("Delete operation failed", {path: err})


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
        """One match result per pattern (``*`` within a path segment, ``**`` across them), at
        most ``limits[i]`` files for pattern ``i``; locally, what exists as written is taken so."""
        if all(_plain_local(p) for p in patterns):
            try:
                found = [_match_local(pattern) for pattern in patterns]
            except OSError:
                pass  # Beam's own match raises its error for this pattern
            else:
                limits = limits or [None] * len(found)
                pairs = zip(found, limits, strict=True)
                return [MatchResult(m.pattern, m.metadata_list[:limit]) for m, limit in pairs]
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
        """A write handle of ``path``; the folders above it are made if missing.

        Locally a link at ``path`` is never written through (``O_NOFOLLOW``): the write fails
        naming the link.
        """
        if _plain_local(path) and _uncompressed(path, compression_type):
            try:
                directory = os.path.dirname(path)
                if directory:
                    os.makedirs(directory, exist_ok=True)
                return os.fdopen(os.open(path, _CREATE_FLAGS, 0o666), "wb")  # the caller closes it
            except OSError as err:
                if os.path.islink(path):
                    raise OSError(
                        errno.ELOOP, f"{path} is a symbolic link: not written through it"
                    ) from err
                # otherwise Beam's own create raises its error for this path
        return _beam().create(path, mime_type, compression_type)

    @staticmethod
    def delete(paths: Sequence[str]) -> None:
        """Delete files, and directories with everything in them; local paths as written."""
        for path in paths:
            if not _plain_local(path):
                _beam().delete([path])
                continue
            try:
                _delete_local(path)
            except OSError as err:
                if _GLOB.search(path):  # Beam would read the name as a pattern
                    raise _delete_error(path, err) from None
                _beam().delete([path])  # Beam raises its own error for this path

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
