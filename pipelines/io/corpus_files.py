"""Finding and opening corpus files on any Beam filesystem (no Beam transform here)."""

from __future__ import annotations

import gzip
import posixpath
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from sbert_core.tabular import open_bz2


def match_corpus(pattern: str) -> list[tuple[str, str, int]]:
    """Files matching ``pattern`` as ``(path, id_prefix, size_in_bytes)``, sorted.

    The id prefix is the path relative to the pattern's fixed directory part, so ids stay the
    same when the corpus is read again from the same place.

    Raises:
        FileNotFoundError: nothing matches.
    """
    matched = sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path)
    if not matched:
        raise FileNotFoundError(f"no input files match {pattern}")
    fixed = pattern.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
    base = fixed if fixed.endswith("/") else posixpath.dirname(fixed) + "/"
    return [
        (
            m.path,
            m.path[len(base) :] if m.path.startswith(base) else posixpath.basename(m.path),
            m.size_in_bytes,
        )
        for m in matched
    ]


def open_decompressed(path: str) -> BinaryIO:
    """Open a file on any Beam filesystem as a binary stream, decompressing ``.gz``/``.bz2``.

    Beam's own ``CompressedFile`` lacks parts of the ``io`` interface that ``TextIOWrapper``
    needs, so decompression uses the standard library on top of the raw stream. Reading a
    truncated stream raises ``EOFError``; data after the last gzip member or bz2 stream that is
    not another one raises ``OSError`` (``bz2.BZ2File`` would silently ignore it).
    """
    raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    name = path.lower()
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if name.endswith(".bz2"):
        return open_bz2(raw)
    return raw
