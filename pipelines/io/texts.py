"""Texts of chosen ids, from embeddings kept with ``--keep-text`` or from the corpus."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from sbert_pipeline.io.corpus_files import files_sha256, match_corpus, open_decompressed
from sbert_pipeline.io.corpus_reader import CorpusRecord, CorpusSpec, read_corpus_file
from sbert_pipeline.io.embeddings import EmbeddingsDataset


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


def texts_from_corpus(
    pattern: str, spec: CorpusSpec, wanted: set[str], embeddings_manifest: dict | None = None
) -> dict:
    """``{id: text}`` for the wanted ids, read again from the corpus files.

    ``spec`` must be the one the embed job used (its manifest's ``input``) so that ids derived
    from file and row come out the same. A file that ``embeddings_manifest`` records with its
    bytes and sha256 (incremental embeds record them) must still have them.

    Raises:
        ValueError: a recorded file changed since it was embedded, naming it.
        FileNotFoundError: nothing matches ``pattern``.
    """
    matched = match_corpus(pattern)
    _require_embedded_files(matched, embeddings_manifest or {})
    found: dict[str, str] = {}
    for path, id_prefix, _ in matched:
        with open_decompressed(path) as stream:
            for item in read_corpus_file(stream, path, spec, id_prefix):
                # The embed job keeps the first row of a repeated id (file, then row order).
                if isinstance(item, CorpusRecord) and item.id in wanted and item.id not in found:
                    found[item.id] = item.text
    return found


def _require_embedded_files(matched: list[tuple[str, str, int]], manifest: dict) -> None:
    """Refuse a matched corpus file that the embed job recorded with other bytes or sha256:
    its texts are not those that were embedded."""
    files = manifest.get("input", {}).get("files", [])
    recorded = {entry.get("path"): entry for entry in files if "sha256" in entry}
    checked = [(path, size, recorded[path]) for path, _, size in matched if path in recorded]
    same_size = [path for path, size, entry in checked if size == entry.get("bytes")]
    digests = dict(zip(same_size, files_sha256(same_size), strict=True))
    for path, size, entry in checked:
        digest = digests.get(path)  # None: another size, not hashed
        if digest != entry["sha256"]:
            now = f"{size} bytes" + ("" if digest is None else f", sha256 {digest[:12]}")
            raise ValueError(
                f"--corpus: {path} changed since the embeddings were made from it (embedded: "
                f"{entry.get('bytes')} bytes, sha256 {entry['sha256'][:12]}; now: {now}); give "
                "the corpus as it was embedded, or embed it again"
            )
