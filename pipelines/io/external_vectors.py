"""Vectors ``sbert embed`` did not make: a Parquet dataset read into an embeddings dataset.

``--embedding-field C --id-field I [--text-field T] [--model-name NAME]`` name the columns of
a folder of ``*.parquet`` files (or one file, or a glob) that has no ``_manifest.json``. The
files are read in name order and every value is checked as our own folders are: no null id or
vector, one dimension for all rows, finite values, each id once. The rows are then written as
float32 shards in our layout (``id``, ``embedding``, ``n_tokens``, ``truncated``, [``text``])
to a local working folder, and the dataset opens with a manifest whose model is
``"external: <name or path>"``, so every consumer reads it as it reads an embed output and two
identities are refused together as two models are.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.io.embeddings import EmbeddingsDataset, parquet_source, require_one_model
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import MANIFEST, STARTED, join
from sbert_pipeline.io.schemas import embeddings_schema
from sbert_pipeline.vectors.checks import require_finite

_FLOATS = (pa.float16(), pa.float32(), pa.float64())
_BATCH = 65536


class ExternalVectorsError(ValueError):
    """A Parquet dataset of external vectors is missing a column or holds a bad value."""


@dataclass(frozen=True)
class ExternalColumns:
    """How to read an external dataset: its columns and the name its model is recorded under.

    Attributes:
        embedding: the vector column (a fixed-size list or list of float16, float32 or float64).
        id: the id column (strings or integers; integers are read as their decimal strings).
        text: an optional text column, kept as ``text``.
        name: the model identity recorded (``"external: <name>"``); default the dataset path.
    """

    embedding: str
    id: str
    text: str | None = None
    name: str | None = None

    @classmethod
    def from_args(cls, args) -> ExternalColumns | None:
        """The columns given on a command line (None when ``--embedding-field`` is not).

        Raises:
            ValueError: ``--id-field``, ``--text-field`` or ``--model-name`` without
                ``--embedding-field``, or ``--embedding-field`` without ``--id-field``.
        """
        embedding = getattr(args, "embedding_field", None)
        if embedding is None:
            given = [
                flag
                for flag, attr in (
                    ("--id-field", "id_field"),
                    ("--text-field", "text_field"),
                    ("--model-name", "model_name"),
                )
                if getattr(args, attr, None) is not None
            ]
            if given:
                raise ValueError(
                    f"{', '.join(given)} apply to external vectors; give --embedding-field too"
                )
            return None
        if getattr(args, "id_field", None) is None:
            raise ValueError("--embedding-field needs --id-field (the column of unique ids)")
        return cls(embedding, args.id_field, args.text_field, args.model_name)


def is_embed_output(path: str) -> bool:
    """Whether ``path`` is a folder with our manifest (else it may be an external dataset)."""
    return FileSystems.exists(join(path, MANIFEST))


def external_files(path: str) -> list[str]:
    """The Parquet files of an external dataset, sorted by name.

    Raises:
        FileNotFoundError: nothing matches.
    """
    if any(char in path for char in "*?["):
        pattern = path
    elif path.endswith(".parquet") and FileSystems.exists(path):
        return [path]
    else:
        pattern = join(path, "*.parquet")
    matched = FileSystems.match([pattern])[0].metadata_list
    files = sorted((m.path for m in matched), key=lambda p: (p.rsplit("/", 1)[-1], p))
    if not files:
        raise FileNotFoundError(f"{path}: no Parquet files (looked for {pattern})")
    return files


def _check_columns(path: str, schema: pa.Schema, columns: ExternalColumns) -> None:
    """Refuse a file without a named column, or whose vector or id column has another type."""
    wanted = [
        ("--embedding-field", columns.embedding),
        ("--id-field", columns.id),
        ("--text-field", columns.text),
    ]
    for flag, name in wanted:
        if name is not None and name not in schema.names:
            raise ExternalVectorsError(
                f"{path} has no column {name!r} ({flag}); its columns: {', '.join(schema.names)}"
            )
    kind = schema.field(columns.embedding).type
    listed = (
        pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind)
    )
    if not listed or kind.value_type not in _FLOATS:
        raise ExternalVectorsError(
            f"{path}: column {columns.embedding!r} is {kind}; --embedding-field needs a list "
            "or fixed-size list of float16, float32 or float64"
        )
    id_type = schema.field(columns.id).type
    if not (
        pa.types.is_string(id_type)
        or pa.types.is_large_string(id_type)
        or pa.types.is_integer(id_type)
    ):
        raise ExternalVectorsError(
            f"{path}: column {columns.id!r} is {id_type}; --id-field needs strings or integers"
        )


def _first_null(values: pa.Array) -> int:
    """The position of the first null of ``values``."""
    return int(np.flatnonzero(values.is_null().to_numpy(False))[0])


def _read_batches(
    path: str, columns: ExternalColumns, names: list[str]
) -> Iterator[pa.RecordBatch]:
    """The ``names`` columns of one file of the dataset, batch by batch, its columns checked.

    Raises:
        ExternalVectorsError: the file cannot be read as Parquet (Arrow's own reason, such as
            "Parquet magic bytes not found", names no file), or lacks a column.
    """
    with parquet_source(path) as source:
        try:
            reader = pq.ParquetFile(source)
            _check_columns(path, reader.schema_arrow, columns)
            yield from reader.iter_batches(batch_size=_BATCH, columns=names)
        except pa.ArrowException as err:  # ArrowInvalid and ArrowIOError among them
            reason = " ".join(str(err).split())
            raise ExternalVectorsError(
                f"{path} is not a readable Parquet file ({reason}); replace it with an intact "
                "copy, or remove it from the dataset"
            ) from None


class _Converter:
    """Checks the rows of an external dataset batch by batch and writes them in our layout."""

    def __init__(self, columns: ExternalColumns, folder: str) -> None:
        self.columns = columns
        self.folder = folder
        self.dim: int | None = None
        self.first_id: str | None = None
        self.seen: set[str] = set()
        self.count = 0
        self.file_rows = 0  # rows of the current file already read
        self.source_types: set[str] = set()

    def _ids(self, path: str, column: pa.Array) -> list[str]:
        if column.null_count:
            row = self.file_rows + _first_null(column)
            raise ExternalVectorsError(
                f"{path}: row {row} has a null id (column {self.columns.id!r})"
            )
        ids = column.cast(pa.string()).to_pylist()
        for name in ids:
            if name in self.seen:
                raise ExternalVectorsError(
                    f"id {name!r} occurs more than once in column {self.columns.id!r} "
                    f"(again in {path}); ids must be unique"
                )
            self.seen.add(name)
        return ids

    def _vectors(self, path: str, column: pa.Array, ids: list[str]) -> np.ndarray:
        what = f"column {self.columns.embedding!r}"
        if column.null_count:
            row = _first_null(column)
            raise ExternalVectorsError(f"{path}: id {ids[row]!r} has a null vector ({what})")
        self.source_types.add(str(column.type.value_type))
        if pa.types.is_fixed_size_list(column.type):
            lengths = np.full(len(column), column.type.list_size, np.int64)
        else:
            lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        values = column.flatten()
        if values.null_count:
            row = int(np.searchsorted(np.cumsum(lengths), _first_null(values), side="right"))
            raise ExternalVectorsError(
                f"{path}: id {ids[row]!r} has a null value in its vector ({what})"
            )
        if self.dim is None and len(lengths):
            self.dim, self.first_id = int(lengths[0]), ids[0]
            if self.dim == 0:
                raise ExternalVectorsError(f"{path}: id {ids[0]!r} has an empty vector ({what})")
        if len(lengths) and (lengths != self.dim).any():
            row = int(np.flatnonzero(lengths != self.dim)[0])
            raise ExternalVectorsError(
                f"{path}: id {ids[row]!r} has a vector of {int(lengths[row])} values, not "
                f"{self.dim} as id {self.first_id!r} has ({what}); every row needs one dimension"
            )
        flat = values.to_numpy(zero_copy_only=False)
        with np.errstate(over="ignore"):  # float64 beyond float32 becomes inf, refused below
            vectors = flat.reshape(len(ids), self.dim or 0).astype(np.float32)
        require_finite(vectors, ids, where=path)
        return vectors

    def convert(self, number: int, path: str) -> str | None:
        """Check one file and write it as ``part-NNNNN.parquet`` (None when it has no rows).

        Raises:
            ExternalVectorsError: the file is no readable Parquet file (damaged, truncated,
                another format), naming it; a missing column or a bad value.
        """
        columns = self.columns
        names = [columns.id, columns.embedding] + ([columns.text] if columns.text else [])
        out = join(self.folder, f"part-{number:05d}.parquet")
        writer = None
        self.file_rows = 0
        try:
            for batch in _read_batches(path, columns, names):
                ids = self._ids(path, batch.column(columns.id))
                vectors = self._vectors(path, batch.column(columns.embedding), ids)
                table = self._table(ids, vectors, batch)
                if writer is None:
                    writer = pq.ParquetWriter(out, table.schema)
                writer.write_table(table)
                self.count += len(ids)
                self.file_rows += len(ids)
        finally:
            if writer is not None:
                writer.close()
        return out if writer is not None else None

    def _table(self, ids: list[str], vectors: np.ndarray, batch: pa.RecordBatch) -> pa.Table:
        text = self.columns.text
        schema = embeddings_schema(int(self.dim or 0), with_text=text is not None)
        n = len(ids)
        arrays = [
            pa.array(ids, pa.string()),
            pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), int(self.dim or 0)),
            pa.array(np.zeros(n, np.int32)),
            pa.array(np.zeros(n, bool)),
        ]
        if text is not None:
            arrays.append(batch.column(text).cast(pa.string()))
        return pa.Table.from_arrays(arrays, schema=schema)


def manifest_for(path: str, columns: ExternalColumns, dim: int, extra: dict) -> dict:
    """The synthetic embeddings manifest of an external dataset: its model is
    ``"external: <name or path>"``, in every model field that is compared."""
    identity = f"external: {columns.name or path}"
    return {
        "kind": "embeddings",
        "model": identity,
        "model_id": identity,
        "weights_sha256": identity,
        "dim": dim,
        "full_dim": dim,
        "truncate_dim": None,
        "pooling": "external",
        "include_prompt": True,
        "normalized": False,
        "max_seq_length": 0,
        "prompt": "",
        "prompt_name": None,
        "dtype": "float32",
        "keep_text": columns.text is not None,
        "external": {
            "path": path,
            "embedding_field": columns.embedding,
            "id_field": columns.id,
            "text_field": columns.text,
            **extra,
        },
    }


def open_external(path: str, columns: ExternalColumns) -> EmbeddingsDataset:
    """Check an external Parquet dataset and open it as an :class:`EmbeddingsDataset`.

    The dataset's ``directory`` is ``path`` (what outputs record); its shards are float32
    copies in a local working folder removed when the dataset is no longer used (or at exit).

    Raises:
        FileNotFoundError: no Parquet files at ``path``.
        ExternalVectorsError (a ValueError): a missing column, a column of another type, a null
            id or vector, a vector of another length, a duplicate id (each naming it).
        NonFiniteEmbeddingError (a ValueError): a NaN or infinite value, naming its id.
    """
    files = external_files(path)
    folder = tempfile.mkdtemp(prefix="sbert-external-")
    try:
        converter = _Converter(columns, folder)
        shards = [converter.convert(number, file) for number, file in enumerate(files)]
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if converter.dim is None:
        shutil.rmtree(folder, ignore_errors=True)
        raise ExternalVectorsError(f"{path}: no rows in {len(files)} Parquet file(s)")
    extra = {"files": files, "rows": converter.count, "dtype": sorted(converter.source_types)}
    manifest = manifest_for(path, columns, converter.dim, extra)
    dataset = EmbeddingsDataset(path, manifest, tuple(s for s in shards if s is not None))
    weakref.finalize(dataset, shutil.rmtree, folder, True)
    return dataset


def recorded_columns(manifest: dict) -> ExternalColumns | None:
    """The columns an external dataset was read with, from a manifest that recorded it (an
    output's ``embeddings`` entry), so a later stage can reopen it the same way; None for an
    embed output."""
    external = manifest.get("external")
    if not external:
        return None
    identity = str(manifest["model_id"]).removeprefix("external: ")
    name = None if identity == external["path"] else identity
    return ExternalColumns(
        external["embedding_field"], external["id_field"], external["text_field"], name
    )


def open_inputs(paths: list[str], columns: ExternalColumns | None) -> list[EmbeddingsDataset]:
    """Open each input (an embed output, or with ``columns`` an external dataset where the
    path has no manifest) and check that one model made them all."""
    if columns is None:
        for path in paths:
            refuse_unnamed_columns(path)
        return EmbeddingsDataset.open_many(paths)
    datasets = [
        EmbeddingsDataset.open(path) if is_embed_output(path) else open_external(path, columns)
        for path in paths
    ]
    require_one_model(datasets)
    return datasets


def refuse_unnamed_columns(path: str) -> None:
    """Refuse Parquet vectors without our manifest given without their columns, naming the
    columns to pass; any other path is left to the embeddings reader (which says what it lacks).

    Raises:
        FileNotFoundError: ``path`` has no ``_manifest.json`` but Parquet files (as a path
            without either is refused by the reader).
    """
    if is_embed_output(path) or FileSystems.exists(join(path, STARTED)):
        return  # ours, or a run of ours that did not finish: the reader says so
    try:
        files = external_files(path)
    except (FileNotFoundError, OSError):
        return
    try:
        with parquet_source(files[0]) as source:
            names = ", ".join(pq.read_schema(source).names)
        found = f" (its columns: {names})"
    except (OSError, pa.ArrowException):
        found = ""
    raise FileNotFoundError(
        f"{path} holds Parquet files but no {MANIFEST}, so it was not written by sbert embed: "
        f"for vectors made elsewhere, name their columns with --embedding-field COLUMN "
        f"--id-field COLUMN (and --text-field COLUMN for texts){found}"
    )


def refuse_remote_workers(datasets: list[EmbeddingsDataset], *, here: bool) -> None:
    """Refuse external vectors for a pipeline whose workers run elsewhere.

    The converted float32 shards lie in a working folder of this machine, which Dataflow, Spark
    or Flink workers cannot read; an exact local search or a local runner reads them here.

    Args:
        datasets: the stage's inputs.
        here: the workers run on this machine.

    Raises:
        ValueError: naming the dataset and what to do instead.
    """
    if here:
        return
    external = [d.directory for d in datasets if "external" in d.manifest]
    if external:
        raise ValueError(
            f"--embedding-field: {', '.join(external)} is converted on this machine, where "
            "remote workers cannot read it; run this stage with the local runner, or write the "
            "vectors as an sbert embed folder on storage the workers read"
        )
