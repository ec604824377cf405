"""``deduplicate(data, ...)``: rows in memory through the embed, pairs and dedup stages, with the
commands' defaults, and what dedup decided joined back to the rows.

It is ``sbert embed``, ``sbert pairs --threshold T`` and ``sbert dedup --threshold T`` (with
``against``: ``sbert dedup --against REF --embeddings EMB --threshold T``) on the same rows:
each stage's ``Options`` gets only what those command lines give, so a default changed in a
stage changes both alike.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sbert_pipeline.dedup as dedup_stage
import sbert_pipeline.embed as embed_stage
import sbert_pipeline.pairs as pairs_stage
from sbert_pipeline.dedup.option_names import keyword_names
from sbert_pipeline.dedup.versions import REMOVED_FILE, read_id_list
from sbert_pipeline.in_memory.rows import (
    ID_COLUMN,
    TEXT_COLUMN,
    InputRows,
    input_rows,
    refuse_shared_ids,
)
from sbert_pipeline.in_memory.stage_folders import StageFolders, stage_folders
from sbert_pipeline.in_memory.tables import joined, refuse_added_columns
from sbert_pipeline.io.output_dir import join, listed_parts, read_manifest
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.stage_api.model_options import ModelOptions
from sbert_pipeline.stage_api.result import Result

from sbert_core.model.source import DEFAULT_MODEL

# The model options ``deduplicate`` passes on to the embed stage (``model`` is its own argument).
MODEL_OPTIONS = tuple(f.name for f in dataclasses.fields(ModelOptions) if f.name != "model")
# The pairs stage's default neighbours per item.
PAIRS_K = next(f.default for f in dataclasses.fields(pairs_stage.Options) if f.name == "k")
# The groups of a single row.
NO_GROUPS = pa.table(
    {
        "id": pa.array([], pa.string()),
        "group": pa.array([], pa.int64()),
        "is_representative": pa.array([], pa.bool_()),
        "score": pa.array([], pa.float32()),
    }
)


@dataclass(frozen=True)
class Deduplicated:
    """What ``deduplicate`` decided, as tables of the input's kind (a DataFrame for a DataFrame
    or a list of texts, a pyarrow Table for a Table).

    Attributes:
        kept: the rows kept, every column, in input order (a list of texts: ``id``, ``text``).
        removed: the rows removed, in input order, plus ``duplicate_of`` (the id of the kept or
            reference row each duplicates) and ``score`` (their cosine).
        groups: ``id``, ``group``, ``kept``, ``score`` (cosine to the group's kept or reference
            row; null for that row) of every row in a group of duplicates, that row first;
            with ``against``, also ``reference`` (a row of ``against``).
        output: the stage folders when ``output`` was given, else None (they were removed).
    """

    kept: Any
    removed: Any
    groups: Any
    output: str | None = None


def deduplicate(
    data: Any,
    text: str = TEXT_COLUMN,
    id: str | None = None,
    threshold: float = 0.9,
    *,
    against: Any = None,
    model: str = DEFAULT_MODEL,
    output: str | None = None,
    **model_options: Any,
) -> Deduplicated:
    """Remove the rows of ``data`` that duplicate another row (cosine >= ``threshold`` between
    their sentence embeddings, grouped by dedup's default method and keep rule), or with
    ``against``, the rows that duplicate a row of ``against``.

    Args:
        data: a pandas DataFrame, a pyarrow Table or a list of texts (ids ``0 .. n-1``; its
            tables come back as DataFrames, so a list needs pandas installed).
        text: the column holding the texts.
        id: the column holding the ids (default: the row numbers ``0 .. n-1``).
        threshold: the cosine at or above which two rows are duplicates.
        against: reference rows (same kinds and columns as ``data``; a list gets the ids
            ``against-0 ..``), always kept: only rows of ``data`` duplicating one of them are
            removed.
        model: a sentence-transformers folder, a Hub id or the bundled ``all-MiniLM-L6-v2``.
        output: a folder to keep the stage folders in (``embeddings``, ``pairs``, ``dedup``,
            ``against``); a later call reuses the stages whose inputs and options did not
            change. Default: a temporary folder, removed at the end.
        **model_options: the embed stage's model options (``compute_dtype``, ``cpu_backend``,
            ``device``, ``batch_size``, ``threads``, ...).

    Raises:
        TypeError: ``data``/``against`` of another kind, or an unknown model option.
        ImportError: a list of texts without pandas installed (the message says how).
        ValueError: no rows, a missing column, a null or empty text, a null or repeated id
            (each naming the argument), or a row the embed stage rejected.
    """
    unknown = sorted(set(model_options) - set(MODEL_OPTIONS))
    if unknown:
        raise TypeError(
            f"deduplicate() got unknown model options {', '.join(unknown)}; the model options "
            f"are: {', '.join(MODEL_OPTIONS)}"
        )
    rows = input_rows(data, text, id, "data")
    refuse_added_columns(rows)
    reference = None if against is None else input_rows(against, text, id, "against")
    if reference is not None:
        refuse_shared_ids(rows, reference)
    model_settings = {"model": model, **model_options}
    if reference is None and len(rows.ids) == 1:
        return Deduplicated(*joined(rows, None, NO_GROUPS, set()), output)  # nothing to compare
    # What dedup warns about names this function's arguments, not the command's flags.
    with stage_folders(output) as folders, keyword_names():
        embeddings = _embed(folders, "embeddings", rows, model_settings)
        if reference is None:
            folder = _pairs_then_dedup(folders, embeddings, len(rows.ids), threshold)
        else:
            reference_embeddings = _embed(folders, "against", reference, model_settings)
            options = dedup_stage.Options(
                embeddings=[embeddings],
                against=[reference_embeddings],
                output=folders.folder("dedup"),
                threshold=threshold,
            )
            reads = (embeddings, reference_embeddings)
            folder = folders.run("dedup", options, dedup_stage.run, reads=reads)
        groups, removed = _decisions(folder)
        kept, removed_rows, group_rows = joined(rows, reference, groups, removed)
        return Deduplicated(kept, removed_rows, group_rows, output)


def _embed(folders: StageFolders, stage: str, rows: InputRows, settings: dict) -> str:
    """Embed ``rows`` (``sbert embed --id-field ID --text-field TEXT``)."""
    options = embed_stage.Options(
        input=rows.corpus,
        output=folders.folder(stage),
        text_field=TEXT_COLUMN,
        id_field=ID_COLUMN,
        **settings,
    )
    folder = folders.run(stage, options, embed_stage.run, rows_digest=rows.digest())
    _refuse_rejected(folder, "data" if stage == "embeddings" else "against")
    return folder


def _pairs_then_dedup(folders: StageFolders, embeddings: str, n: int, threshold: float) -> str:
    """``sbert pairs --threshold T``, then ``sbert dedup --threshold T`` on its pairs; under
    ``k + 1`` rows, ``--k n-1`` (the most neighbours they have; pairs refuses more)."""
    k = min(PAIRS_K, n - 1)
    options = pairs_stage.Options(
        embeddings=[embeddings], output=folders.folder("pairs"), threshold=threshold, k=k
    )
    pairs = folders.run("pairs", options, pairs_stage.run, reads=(embeddings,))
    options = dedup_stage.Options(pairs=pairs, output=folders.folder("dedup"), threshold=threshold)
    return folders.run("dedup", options, dedup_stage.run, reads=(pairs,))


def _refuse_rejected(folder: str, argument: str) -> None:
    """Every row must have been embedded: a rejected one would be neither kept nor removed."""
    manifest = read_manifest(folder)
    rejected = manifest.get("counts", {}).get("rejected", 0)
    if rejected:
        parts = listed_parts(folder, manifest, ERRORS_DIR) or []
        errors = pq.read_table(parts[0]).to_pylist() if parts else []
        first = f" (first: id {errors[0].get('id')!r}: {errors[0].get('reason')})" if errors else ""
        raise ValueError(f"{argument}: {rejected} rows could not be embedded{first}")


def _decisions(folder: str) -> tuple[pa.Table, set[str]]:
    """dedup's ``groups.parquet`` (its main table) and its removed ids."""
    groups = Result(folder, read_manifest(folder), None).to_arrow()
    return groups, set(read_id_list(join(folder, REMOVED_FILE)))
