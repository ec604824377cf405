"""Finding and opening corpus files on any Beam filesystem (no Beam transform here)."""

from __future__ import annotations

import gzip
import hashlib
import os
import posixpath
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

from sbert_pipeline.io.filesystems import CompressionTypes, FileSystems, split_pattern

from sbert_core.errors import DataFileError
from sbert_core.tabular import COMPRESSED_SUFFIXES, FORMATS, detect_format, open_bz2

_CHUNK = 1 << 22  # bytes hashed at a time


def match_corpus(pattern: str) -> list[tuple[str, str, int]]:
    """Files matching ``pattern`` as ``(path, id_prefix, size_in_bytes)``, sorted.

    The id prefix is the path relative to the folder the pattern lists, so ids stay the same
    when the corpus is read again from the same place. A local folder or file whose name holds
    glob characters is matched as written (see :mod:`sbert_pipeline.io.filesystems`).

    Raises:
        FileNotFoundError: nothing matches.
        DataFileError: a matched file's name is not UTF-8 (see :func:`refuse_unrecordable_names`),
            or ``pattern`` names a local folder (the message gives the glob to use).
    """
    matched = sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path)
    if not matched:
        raise FileNotFoundError(f"no input files match {pattern}")
    folders = [m.path for m in matched if "://" not in m.path and os.path.isdir(m.path)]
    if folders:
        raise DataFileError(folder_hint(folders[0]))
    refuse_unrecordable_names(m.path for m in matched)
    base, _ = split_pattern(pattern)
    return [
        (
            m.path,
            m.path[len(base) :] if m.path.startswith(base) else posixpath.basename(m.path),
            m.size_in_bytes,
        )
        for m in matched
    ]


def folder_hint(folder: str) -> str:
    """What to pass instead of a local folder as ``--input``: a glob of the corpus files in
    it, by their extensions (``corpus/*.jsonl``)."""
    kinds = set()
    for name in os.listdir(folder):
        if name.startswith((".", "_")) or not os.path.isfile(os.path.join(folder, name)):
            continue
        try:
            detect_format(name)
        except DataFileError:
            continue
        compressed = next((end for end in COMPRESSED_SUFFIXES if name.lower().endswith(end)), "")
        kinds.add("." + name[: len(name) - len(compressed)].rsplit(".", 1)[-1] + compressed)
    base = folder.rstrip("/")
    globs = [f"{base}/*{kind}" for kind in sorted(kinds)]
    if not globs:
        formats = ", ".join(f".{fmt}" for fmt in FORMATS)
        return (
            f"{folder} is a folder holding no corpus file ({formats}, optionally .gz or "
            f".bz2); name the files with a glob such as {base}/*.jsonl"
        )
    return (
        f"{folder} is a folder, not a corpus file: use {' or '.join(globs)} (a glob of its files)"
    )


def refuse_unrecordable_names(paths: Iterable[str]) -> None:
    """Refuse an input file whose name is not UTF-8, naming it by its bytes.

    Such a name (``caf\\xe9.txt`` written in Latin-1) reaches Python as a string with lone
    surrogates, which the run's records cannot hold: row ids and error sources are UTF-8
    Parquet strings, ledgers and the manifest UTF-8 JSON. Refused before the output is touched.

    Raises:
        DataFileError: naming the first such file as ``b'...'``.
    """
    for path in paths:
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise DataFileError(
                f"input file {os.fsencode(path)!r}: its name is not valid UTF-8, which the "
                "output (ids, error sources, manifest) cannot record; rename it (e.g. with "
                "convmv) or leave it out of --input"
            ) from None


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


def file_sha256(path: str) -> str:
    """sha256 of a file's bytes as stored (the compressed bytes of a compressed file)."""
    hasher = hashlib.sha256()
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def files_sha256(paths: Sequence[str]) -> list[str]:
    """:func:`file_sha256` of each path, in order (hashed in threads: hashlib releases the GIL;
    cheap next to parsing or embedding the same bytes)."""
    if not paths:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
        return list(pool.map(file_sha256, paths))
