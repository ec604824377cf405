"""Texts of chosen ids, from embeddings kept with ``--keep-text`` or from the corpus."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines.io.corpus_files import match_corpus, open_decompressed
from pipelines.io.corpus_reader import CorpusRecord, CorpusSpec, read_corpus_file
from pipelines.io.embeddings import EmbeddingsDataset


def texts_from_embeddings(datasets: Sequence[EmbeddingsDataset], wanted: set[str]) -> dict:
    """``{id: text}`` for the wanted ids, from embeddings written with ``--keep-text``."""
    found: dict[str, str] = {}
    if not wanted:
        return found
    wanted_array = pa.array(sorted(wanted), pa.string())
    for dataset in datasets:
        if not dataset.has_text:
            continue
        for path in dataset.shards:
            with FileSystems.open(path) as handle:
                table = pq.read_table(handle, columns=["id", "text"])
            table = table.filter(pc.is_in(table.column("id"), value_set=wanted_array))
            found.update(
                zip(table.column("id").to_pylist(), table.column("text").to_pylist(), strict=True)
            )
    return found


def recorded_corpus_spec(
    embeddings_manifest: dict,
    fmt: str | None = None,
    text_field: str | None = None,
    id_field: str | None = None,
) -> CorpusSpec:
    """How the embed job that wrote ``embeddings_manifest`` read its corpus (its ``input``), so
    that the corpus read again gives the same ids (derived ``file:row`` ids included); a given
    ``fmt``, ``text_field`` or ``id_field`` overrides the recorded one."""
    recorded = embeddings_manifest.get("input", {})
    return CorpusSpec(
        fmt=fmt or recorded.get("fmt"),
        text_field=text_field or recorded.get("text_field") or "text",
        id_field=id_field if id_field is not None else recorded.get("id_field"),
        max_record_bytes=recorded.get("max_record_bytes", CorpusSpec.max_record_bytes),
        max_record_lines=recorded.get("max_record_lines", CorpusSpec.max_record_lines),
    )


def texts_from_corpus(pattern: str, spec: CorpusSpec, wanted: set[str]) -> dict:
    """``{id: text}`` for the wanted ids, read again from the corpus files.

    ``spec`` must be the one the embed job used (its manifest's ``input``) so that ids derived
    from file and row come out the same.
    """
    found: dict[str, str] = {}
    for path, id_prefix, _ in match_corpus(pattern):
        with open_decompressed(path) as stream:
            for item in read_corpus_file(stream, path, spec, id_prefix):
                # The embed job keeps the first row of a repeated id (file, then row order).
                if isinstance(item, CorpusRecord) and item.id in wanted and item.id not in found:
                    found[item.id] = item.text
    return found
