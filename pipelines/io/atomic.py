"""Files that appear whole: written under a temporary name, then renamed into place.

Every temp-then-rename of the project goes through here (one rule, one place):

- Local disks: the temporary file sits in the target's folder (so the rename is atomic) and is
  named ``.{name}.<random>.tmp`` (output folders recognise such names as ours and clear them);
  it is flushed to disk before ``os.replace`` puts it over the target, so a full disk fails the
  write and leaves the previous file.
- Object stores (``gs://``, ``s3://``, ...): one object write is complete or absent, so
  :func:`write_bytes_replacing` writes once; files written through a Beam filesystem handle
  (Parquet, FAISS indexes) go to :func:`staging_path` and :func:`replace` deletes the old object,
  then renames (object stores have no atomic rename-over).

A failed write removes its temporary file. sbert_core's saved models and training checkpoints
rename whole directories with their own code: sbert_core may not import pipelines.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid
from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from sbert_pipeline.io.filesystems import FileSystems


def is_local_path(path: str) -> bool:
    """Whether ``path`` is on the local filesystem (where locks and ``os.replace`` work)."""
    return "://" not in path or path.startswith("file://")


def staging_path(final: str) -> str:
    """A fresh temporary name beside ``final`` (``{final}.<random>.tmp``), on any filesystem."""
    return f"{final}.{uuid.uuid4().hex}.tmp"


def replace(staging: str, final: str) -> None:
    """Move a finished temporary file to ``final``, replacing a file already there.

    Locally one ``os.replace`` (atomic; the folder is made if missing); on object stores the old
    object is deleted first, then the new one renamed.
    """
    if is_local_path(final):
        target = final.removeprefix("file://")
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        os.replace(staging.removeprefix("file://"), target)
        return
    if FileSystems.exists(final):
        FileSystems.delete([final])
    FileSystems.rename([staging], [final])


@contextlib.contextmanager
def local_replacing(path: str) -> Iterator[str]:
    """A temporary local path to write; on success it is synced and renamed to ``path``.

    Example:
        >>> with local_replacing("out/vectors.npy") as tmp:
        ...     np.save(tmp, vectors)
    """
    target = path.removeprefix("file://")
    directory = os.path.dirname(target) or "."
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory
    )
    os.close(handle)
    try:
        yield temporary
        with open(temporary, "rb+") as stream:
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the other outputs are not
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_bytes_replacing(
    path: str, data: bytes, *, mime_type: str = "application/octet-stream"
) -> None:
    """Write ``data`` to ``path`` so that it appears whole or not at all, on any filesystem."""
    if not is_local_path(path):
        with FileSystems.create(path, mime_type=mime_type) as handle:
            handle.write(data)
        return
    with local_replacing(path) as temporary, open(temporary, "wb") as stream:
        stream.write(data)


def write_text_replacing(path: str, text: str, *, mime_type: str = "text/plain") -> None:
    """Write UTF-8 text (written as given: no newline translation) whole or not at all."""
    write_bytes_replacing(path, text.encode("utf-8"), mime_type=mime_type)


def json_text(value: dict) -> str:
    """The project's JSON file format: indented, non-JSON values as ``str``, a final newline."""
    return json.dumps(value, indent=2, default=str) + "\n"


def write_json_replacing(path: str, value: dict) -> None:
    """Write a JSON object whole or not at all (see :func:`json_text` for the format)."""
    write_text_replacing(path, json_text(value), mime_type="application/json")


def write_parquet_replacing(path: str, tables: Iterable[pa.Table], schema: pa.Schema) -> int:
    """Write tables as one Parquet file under a temporary name, then rename it to ``path``.

    Returns the number of rows. A file already at ``path`` (an earlier attempt of the same shard)
    is replaced, so a retried shard never duplicates rows.
    """
    with StagedFiles(schema) as files:
        files.open(path)  # no tables: an empty file with the schema
        for table in tables:
            files.write(path, table)
    return files.rows


def write_table(path: str, table: pa.Table) -> int:
    """Write one table as a Parquet file whole or not at all (see
    :func:`write_parquet_replacing`); its rows."""
    return write_parquet_replacing(path, [table], table.schema)


class StagedFiles:
    """Parquet files written under temporary names and renamed together when all are done.

    A retry of the same work writes the same names, so its files replace the first attempt's.
    Used as a context manager, the temporaries of a failed attempt are deleted.

    Example:
        >>> with StagedFiles(schema) as files:
        ...     files.write("out/part-0.parquet", table)
        >>> files.published
        ['out/part-0.parquet']
    """

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema
        self._open: dict[str, tuple[str, object, pq.ParquetWriter]] = {}
        self.rows = 0
        self.published: list[str] = []

    def open(self, path: str) -> pq.ParquetWriter:
        """The writer of the file that will become ``path`` (started on first use)."""
        if path not in self._open:
            staging = staging_path(path)
            handle = FileSystems.create(staging)
            self._open[path] = (staging, handle, pq.ParquetWriter(handle, self._schema))
        return self._open[path][2]

    def write(self, path: str, table: pa.Table) -> None:
        """Append ``table`` to the file that will become ``path``."""
        self.open(path).write_table(table)
        self.rows += table.num_rows

    def pending(self) -> list[str]:
        """The final names of the files written so far, sorted."""
        return sorted(self._open)

    def close(self) -> list[str]:
        """Close every file and move it to its final name; returns the final names, sorted."""
        for _, handle, writer in self._open.values():
            writer.close()
            handle.close()
        finals = self.pending()
        for final in finals:
            replace(self._open[final][0], final)
        self._open.clear()
        self.published = finals
        return finals

    def discard(self) -> None:
        """Close and delete the temporaries (nothing is published)."""
        for staging, handle, writer in self._open.values():
            with contextlib.suppress(Exception):
                writer.close()
            with contextlib.suppress(Exception):
                handle.close()
            with contextlib.suppress(Exception):
                if FileSystems.exists(staging):
                    FileSystems.delete([staging])
        self._open.clear()

    def __enter__(self) -> StagedFiles:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()
