"""The ``pairs/`` output folder as the later stages read it (one reader; the pairs stage's
writers are in :mod:`sbert_pipeline.pairs.output_tables`).

A complete folder (docs/architecture.md, folder contracts) holds ``_manifest.json``
(``kind: pairs``, ``method``, ``k``, ``threshold``: the score down to which ``pairs/`` is
complete, or null, ``n``, and the embeddings it was computed from under ``embeddings``),
``pairs/part-*.parquet`` (``id_a < id_b``, ``score``; each pair once) and
``neighbors/part-*.parquet`` (``id``, ``neighbor_ids``, ``scores``; one row per item).

A folder written by ``sbert verify`` keeps that contract: its ``pairs/`` parts add a ``cosine``
column (the bi-encoder's score; ``score`` is then the cross-encoder's, see
:data:`VERIFIED_PAIRS_SCHEMA`) and its manifest a ``verify`` section (:attr:`PairsOutput.verified`).

:class:`PairsOutput` streams the pairs above a score as columns (dedup); :func:`read_pairs` and
:func:`read_neighbors` return whole tables (recall checks, tests).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.io.embeddings import (
    EmbeddingsDataset,
    describe_version,
    require_compatible,
    shard_paths,
    version_digest,
)
from sbert_pipeline.io.external_vectors import is_embed_output, open_external, recorded_columns
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import join, listed_parts, read_manifest
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from sbert_pipeline.vectors.checks import check_cosine

NEIGHBORS = "neighbors"
PAIRS = "pairs"
# The bi-encoder's cosine of a verified pair, beside its cross-encoder ``score``.
COSINE = "cosine"
VERIFIED_PAIRS_SCHEMA = PAIRS_SCHEMA.append(pa.field(COSINE, pa.float32(), nullable=False))
# The manifest section of a folder ``sbert verify`` wrote (the cross-encoder, band, counts).
VERIFY_SECTION = "verify"
# The key of an ``embeddings`` entry holding that version's digest (``version_digest``).
VERSION_DIGEST = "manifest_digest"


class StaleEmbeddingsError(ValueError):
    """The embeddings are another version than the one the pairs were computed from."""


@dataclass(frozen=True)
class PairColumns:
    """Pairs as read: string ids of both ends and float32 scores."""

    id_a: pa.Array
    id_b: pa.Array
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    @staticmethod
    def concat(parts: list[PairColumns]) -> PairColumns:
        """One set from several."""
        if not parts:
            empty = pa.array([], pa.string())
            return PairColumns(empty, empty, np.zeros(0, np.float32))
        return PairColumns(
            pa.concat_arrays([part.id_a for part in parts]),
            pa.concat_arrays([part.id_b for part in parts]),
            np.concatenate([part.scores for part in parts]),
        )


@dataclass(frozen=True)
class PairsOutput:
    """A complete ``sbert pairs`` output directory."""

    directory: str
    manifest: dict

    @classmethod
    def open(cls, directory: str) -> PairsOutput:
        """Open a pairs output; refuses one without a manifest or with a nonsensical threshold.

        Raises:
            FileNotFoundError: no manifest (missing directory or unfinished job).
            CorruptOutputError: the files disagree with the manifest (see
                :func:`sbert_pipeline.io.output_dir.read_manifest`).
            ValueError: the manifest belongs to another stage or its threshold is not a cosine.
        """
        manifest = read_manifest(directory)
        kind = manifest.get("kind", "pairs")
        if kind != "pairs":
            raise ValueError(f"{directory} holds {kind!r}, not the output of sbert pairs")
        threshold = manifest.get("threshold")
        if threshold is not None:
            check_cosine(threshold, f"{directory}: the manifest's threshold")
        return cls(directory, manifest)

    @property
    def threshold(self) -> float | None:
        """Score down to which ``pairs/`` holds every pair (None: not written for a threshold)."""
        value = self.manifest.get("threshold")
        return None if value is None else float(value)

    @property
    def verified(self) -> bool:
        """Whether ``sbert verify`` wrote the folder (``score``: the cross-encoder's, ``cosine``:
        the bi-encoder's)."""
        return isinstance(self.manifest.get(VERIFY_SECTION), dict)

    @property
    def k(self) -> int | None:
        """Neighbours per item in ``neighbors/``."""
        value = self.manifest.get("k")
        return None if value is None else int(value)

    @property
    def pair_files(self) -> list[str]:
        """Parquet files of ``pairs/``, sorted: those the manifest lists (and :meth:`open`
        checked), or every part for a manifest without a file list."""
        return self._parts(PAIRS)

    @property
    def neighbor_files(self) -> list[str]:
        """Parquet files of ``neighbors/``, sorted (as :attr:`pair_files`)."""
        return self._parts(NEIGHBORS)

    def _parts(self, folder: str) -> list[str]:
        listed = listed_parts(self.directory, self.manifest, folder)
        return listed if listed is not None else shard_paths(join(self.directory, folder))

    def embeddings_sources(self) -> list[tuple[str, dict | None]]:
        """``(directory, manifest recorded then or None)`` of every embeddings input.

        The manifest may name them as ``{"directory", "manifest"}``, a list of those, or plain
        directory strings (also under ``embeddings_dirs`` or ``inputs``).
        """
        return [(directory, manifest) for directory, manifest, _ in self._recorded_inputs()]

    def _recorded_inputs(self) -> list[tuple[str, dict | None, str | None]]:
        """``(directory, manifest, version digest)`` of every embeddings input as recorded; the
        digest is the one stored (``manifest_digest``) or, for folders written before it was,
        that of the recorded manifest; None where no manifest was recorded."""
        recorded = self.manifest.get("embeddings")
        if recorded is None:
            recorded = self.manifest.get("embeddings_dirs", self.manifest.get("inputs"))
        if recorded is None:
            return []
        entries = recorded if isinstance(recorded, list) else [recorded]
        sources = []
        for entry in entries:
            if isinstance(entry, str):
                sources.append((entry, None, None))
            elif isinstance(entry, dict) and isinstance(entry.get("directory"), str):
                manifest = entry.get("manifest")
                digest = entry.get(VERSION_DIGEST) or (manifest and version_digest(manifest))
                sources.append((entry["directory"], manifest, digest))
            else:
                raise ValueError(
                    f"{self.directory}: cannot read the embeddings entry {entry!r} of its manifest"
                )
        return sources

    def open_embeddings(
        self, directories: list[str] | None = None, *, moved: str
    ) -> list[EmbeddingsDataset]:
        """The embeddings the pairs were computed from, opened as the pairs stage read them (own
        vectors with the columns it recorded), and checked to be the very version it read.

        Args:
            directories: the same embeddings elsewhere, when they moved (default: as recorded).
            moved: what to do when a recorded folder is gone (e.g. ``"pass --embeddings DIR"``).

        Raises:
            FileNotFoundError: a folder is gone, naming ``moved``.
            ValueError: the manifest names no embeddings and none are given.
            IncompatibleEmbeddingsError: another model or settings than the pairs recorded.
            StaleEmbeddingsError: another version of the embeddings (embedded again since),
                naming both.
        """
        recorded = self._recorded_inputs()
        if not directories and not recorded:
            raise ValueError(f"{self.directory}: its manifest names no embeddings; {moved}")
        # Own vectors (no embed manifest) are read again with the columns the pairs recorded.
        columns = next(filter(None, (recorded_columns(m) for _, m, _ in recorded if m)), None)
        datasets = []
        for directory in directories or [directory for directory, _, _ in recorded]:
            try:
                if columns is not None and not is_embed_output(directory):
                    datasets.append(open_external(directory, columns))
                else:
                    datasets.append(EmbeddingsDataset.open(directory))
            except FileNotFoundError as err:
                raise FileNotFoundError(
                    f"{err} (the embeddings of the pairs in {self.directory}; if they moved, "
                    f"{moved})"
                ) from err
        first = next((manifest for _, manifest, _ in recorded if manifest), None)
        for dataset in datasets:
            if first is not None:
                require_compatible(
                    first, dataset.manifest, f"the pairs' embeddings and {dataset.directory}"
                )
            self._require_version(dataset, recorded)
        for other in datasets[1:]:
            require_compatible(
                datasets[0].manifest,
                other.manifest,
                f"{datasets[0].directory} and {other.directory}",
            )
        return datasets

    def _require_version(
        self, dataset: EmbeddingsDataset, recorded: list[tuple[str, dict | None, str | None]]
    ) -> None:
        """Refuse embeddings that are not one of the versions the pairs were computed from."""
        versions = [(d, m, digest) for d, m, digest in recorded if digest is not None]
        if not versions or version_digest(dataset.manifest) in {v[2] for v in versions}:
            return
        # Name the version recorded for this folder (else the first recorded).
        _, then, digest = next((v for v in versions if v[0] == dataset.directory), versions[0])
        made, found = describe_version(then, digest), describe_version(dataset.manifest)
        raise StaleEmbeddingsError(
            f"{dataset.directory} holds another version of the embeddings than the pairs in "
            f"{self.directory} were computed from (pairs made from: {made}; found: {found}); "
            "run sbert pairs again on these embeddings, or give the pairs made from them"
        )

    def read_pairs(self, min_score: float) -> PairColumns:
        """The pairs of ``pairs/`` with ``score >= min_score`` (float32 comparison)."""
        parts = []
        limit = np.float32(min_score)
        for path in self.pair_files:
            for batch in _batches(path, ("id_a", "id_b", "score")):
                scores = _float32(batch.column("score"), path)
                keep = scores >= limit
                mask = pa.array(keep)
                parts.append(
                    PairColumns(
                        batch.column("id_a").filter(mask),
                        batch.column("id_b").filter(mask),
                        scores[keep],
                    )
                )
        return PairColumns.concat(parts)

    def read_neighbor_pairs(self, min_score: float) -> PairColumns:
        """Pairs ``(id, neighbour)`` from ``neighbors/`` with ``score >= min_score``, as listed
        (most pairs appear twice, once from each end)."""
        parts = []
        limit = np.float32(min_score)
        for path in self.neighbor_files:
            for batch in _batches(path, ("id", "neighbor_ids", "scores")):
                neighbors, scores = batch.column("neighbor_ids"), batch.column("scores")
                if not pc.all(
                    pc.equal(pc.list_value_length(neighbors), pc.list_value_length(scores))
                ).as_py():
                    raise ValueError(f"{path}: neighbor_ids and scores differ in length in a row")
                flat_scores = _float32(pc.list_flatten(scores), path)
                keep = flat_scores >= limit
                mask = pa.array(keep)
                owners = batch.column("id").take(pc.list_parent_indices(neighbors))
                parts.append(
                    PairColumns(
                        owners.filter(mask),
                        pc.list_flatten(neighbors).filter(mask),
                        flat_scores[keep],
                    )
                )
        return PairColumns.concat(parts)


def open_pairs_output(directory: str) -> dict:
    """The manifest of a finished ``sbert pairs`` output (see :meth:`PairsOutput.open`)."""
    return PairsOutput.open(directory).manifest


def read_neighbors(directory: str, ids: Iterable[str] | None = None) -> pa.Table:
    """The ``neighbors/`` rows of a pairs output (all, or only those of ``ids``)."""
    wanted = None if ids is None else pa.array(sorted(set(ids)), pa.string())
    return _read_parts(join(directory, NEIGHBORS), NEIGHBORS_SCHEMA, "id", wanted)


def read_pairs(directory: str, min_score: float | None = None) -> pa.Table:
    """The ``pairs/`` rows of a pairs output, optionally only those with ``score >= min_score``."""
    table = _read_parts(join(directory, PAIRS), PAIRS_SCHEMA, None, None)
    if min_score is not None:
        table = table.filter(pc.greater_equal(table["score"], pa.scalar(min_score, pa.float32())))
    return table


def _read_parts(folder: str, schema: pa.Schema, key: str | None, wanted) -> pa.Table:
    tables = []
    for path in shard_paths(folder):
        with FileSystems.open(path) as handle:
            table = pq.read_table(handle, schema=schema)
        if wanted is not None:
            table = table.filter(pc.is_in(table[key], value_set=wanted))
        tables.append(table)
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _batches(path: str, columns: tuple[str, ...]):
    with FileSystems.open(path) as handle:
        parquet = pq.ParquetFile(handle)
        missing = [name for name in columns if name not in parquet.schema_arrow.names]
        if missing:
            raise ValueError(
                f"{path} lacks the column(s) {', '.join(missing)} (has: "
                f"{', '.join(parquet.schema_arrow.names)})"
            )
        yield from parquet.iter_batches(columns=list(columns), batch_size=1 << 20)


def _float32(column: pa.Array, path: str) -> np.ndarray:
    if column.null_count:
        raise ValueError(f"{path}: {column.null_count} null scores")
    return column.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
