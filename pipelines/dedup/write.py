"""The write phase of a dedup run: ``groups.parquet``, the id lists, the corpus index, the
deduplicated corpus (``--apply``), ``report.html`` and ``_manifest.json``, written to the run's
attempt area and published together (:func:`write`); a dry run writes nothing."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.dedup.corpus import CORPUS_DIR, REJECTED_FILE, apply_corpus
from sbert_pipeline.dedup.decide import Decided, Grouped
from sbert_pipeline.dedup.inputs import DedupInputs
from sbert_pipeline.dedup.known import KnownView, known_found, known_view
from sbert_pipeline.dedup.report import (
    GroupView,
    Member,
    changes_html,
    write_report_html,
)
from sbert_pipeline.dedup.summary import DedupSummary, dedup_manifest, similarity_histogram
from sbert_pipeline.dedup.versions import (
    GROUPS_FILE,
    GROUPS_SCHEMA,
    INDEX_FILE,
    INDEX_SCHEMA,
    KEPT_FILE,
    REMOVED_FILE,
    REPORT_FILE,
    spec_json,
    write_id_list,
)
from sbert_pipeline.grouping.item_ids import ItemIds
from sbert_pipeline.grouping.model import REASONS, Grouping
from sbert_pipeline.grouping.sizes import removed_below, size_distribution
from sbert_pipeline.io.atomic import write_table
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import OutputLayout, join
from sbert_pipeline.io.resources import peak_rss
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.stage_output import stage_output
from sbert_pipeline.stage_api.stops import JobFailedError
from sbert_pipeline.vectors.cosine_range import clamp_cosines

# Members listed per group in the report; the rest are in groups.parquet.
REPORT_MEMBERS = 20


def write_id_lists(
    output: str, ids: Sequence[str], kept: np.ndarray, rank: np.ndarray
) -> tuple[int, int]:
    """``kept_ids.txt`` and ``removed_ids.txt`` in rank order; returns (kept, removed) written."""
    by_rank, listed = np.argsort(rank, kind="stable"), ItemIds.of(ids)
    flags = kept[by_rank]
    n_kept = write_id_list(join(output, KEPT_FILE), listed.iter_rows(by_rank[flags]))
    n_removed = write_id_list(join(output, REMOVED_FILE), listed.iter_rows(by_rank[~flags]))
    return n_kept, n_removed


def largest_groups(
    groups: Grouping,
    limit: int,
    ids: Sequence[str],
    rank: np.ndarray,
    scores: np.ndarray,
    texts: dict[str, str],
    group_ids: np.ndarray | None = None,
) -> list[GroupView]:
    """The ``limit`` largest groups as the report shows them (at most REPORT_MEMBERS each),
    numbered by ``group_ids`` (``(G,)`` the published ids; default ``0 .. G-1``)."""
    shown = min(limit, groups.n_groups)
    numbers = range(shown) if group_ids is None else group_ids[:shown].tolist()
    return group_views(
        ids,
        [groups.members(g, rank)[:REPORT_MEMBERS] for g in range(shown)],
        groups.kept,
        scores,
        texts,
        list(numbers),
        groups.sizes[:shown].tolist(),
    )


def groups_parquet_table(
    ids: pa.Array,
    groups: Grouping,
    rank: np.ndarray,
    scores: np.ndarray,
    group_ids: np.ndarray | None = None,
) -> pa.Table:
    """``groups.parquet``: one row per grouped item, by group, representative first, then rank.

    Args:
        ids: every item's id.
        groups: the groups.
        rank: the order rank.
        scores: ``(n,)`` each member's score with its representative (NaN: unknown / itself).
        group_ids: ``(G,)`` the id written for each group (default: its number ``0 .. G-1``;
            stable ids: pipelines/dedup/versions.py).
    """
    rows = np.flatnonzero(groups.group >= 0)
    rows = rows[np.lexsort((rank[rows], ~groups.representative[rows], groups.group[rows]))]
    member_scores = clamp_cosines(scores[rows])
    return pa.Table.from_arrays(
        [
            ids.take(pa.array(rows, pa.int64())),
            pa.array(
                groups.group[rows] if group_ids is None else group_ids[groups.group[rows]],
                pa.int64(),
            ),
            pa.array(groups.representative[rows], pa.bool_()),
            pa.array(groups.sizes[groups.group[rows]], pa.int64()),
            pa.array(member_scores, pa.float32(), mask=np.isnan(member_scores)),
        ],
        schema=GROUPS_SCHEMA,
    )


def reference_column(table: pa.Table, ids: pa.Array, reference: np.ndarray) -> pa.Table:
    """``groups.parquet`` with a ``reference`` column: whether each member is a row of the
    ``--against`` reference (always kept, never in the id lists). Written with ``--against``
    only, so other runs keep their schema."""
    rows = pc.index_in(table["id"], value_set=ids).to_numpy()
    return table.append_column(
        pa.field("reference", pa.bool_(), nullable=False), pa.array(reference[rows], pa.bool_())
    )


def reason_column(table: pa.Table, ids: pa.Array, reason: np.ndarray) -> pa.Table:
    """``groups.parquet`` with a ``reason`` column: why each member is in its group (null for
    the kept member). Written for embeddings with copies only, so others keep their schema."""
    rows = pc.index_in(table["id"], value_set=ids).to_numpy()
    codes = reason[rows]
    texts = pa.array([REASONS[code] for code in codes.tolist()], pa.string())
    texts = pc.if_else(table["is_representative"], pa.scalar(None, pa.string()), texts)
    return table.append_column(pa.field("reason", pa.string()), texts)


def write_index(folder: str, scan) -> dict:
    """Write ``corpus_index.parquet`` into ``folder`` (the run's attempt folder) from a
    :class:`~sbert_pipeline.dedup.corpus.CorpusScan`; returns the manifest's ``corpus.index``: the
    spec, the files (path, id prefix, bytes, sha256, rows read, records) and how the scan took
    them (``reused``, ``parsed``, ``texts_from_embeddings``)."""
    file_rows = scan.file_rows
    numbers = [np.full(len(rows.ids), number, np.int32) for number, rows in enumerate(file_rows)]
    table = pa.table(
        {
            "file": np.concatenate(numbers) if numbers else np.zeros(0, np.int32),
            "row": np.concatenate([rows.numbers for rows in file_rows]).astype(np.int64)
            if file_rows
            else np.zeros(0, np.int64),
            "id": pa.array([item for rows in file_rows for item in rows.ids], pa.string()),
        },
        schema=INDEX_SCHEMA,
    )
    with FileSystems.create(join(folder, INDEX_FILE)) as handle:
        pq.write_table(table, handle)
    return {
        "file": INDEX_FILE,
        "spec": spec_json(scan.spec),
        "files": [
            {
                "path": path,
                "id_prefix": prefix,
                "bytes": size,
                "sha256": digest,
                "rows": rows.rows,
                "records": len(rows.ids),
            }
            for (path, prefix, size), digest, rows in zip(
                scan.files, scan.digests, file_rows, strict=True
            )
        ],
        **scan.counts,
    }


PINNED_NOTE = (
    "the sweep and the method comparison group the corpus pairs without the pinned rows "
    "(--stable-keep, --against); the counts at the threshold include them"
)
# The manifest's ``incremental`` section (the same shape in every stage).
FULL_REASON = (
    "dedup recomputes its groups from the full pairs (cheap); with the previous version's "
    "settings (or --stable-keep) it pins the rows that version kept (stable_keep, changes)"
)

# What a dedup run writes (see docs/architecture.md, ``dedup/``).
LAYOUT = OutputLayout(
    files=(
        GROUPS_FILE,
        KEPT_FILE,
        REMOVED_FILE,
        REPORT_FILE,
        REJECTED_FILE,
        INDEX_FILE,
        f"{CORPUS_DIR}/*",
    )
)


@dataclass(frozen=True)
class DedupResult(Result):
    """A dedup run's :class:`Result`; a dry run has no output folder and no manifest."""

    output: str | None
    summary: DedupSummary

    def line(self) -> str:
        """The summary line; for a dry run the threshold sweep first (what it is run for)."""
        if self.summary.dry_run:
            return "\n".join([*self.summary.sweep_lines(), self.summary.line()])
        return self.summary.line()


def write(inputs: DedupInputs, grouped: Grouped, decided: Decided, start: float) -> DedupResult:
    """Publish the outputs (the fourth phase); a dry run writes nothing and says the counts."""
    options, n, groups = inputs.options, inputs.n, decided.grouping
    facts = _facts(inputs, grouped, decided)
    if options.dry_run:
        removed = groups.n_removed
        summary = DedupSummary(
            output=None, dry_run=True, kept=n - removed, removed=removed,
            seconds=time.perf_counter() - start, **facts,
        )  # fmt: skip
        return DedupResult(output=None, manifest={}, summary=summary)
    out = stage_output("dedup", options, LAYOUT)
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    with out:
        n_kept, n_removed = _write_lists(out.attempt, inputs, decided)
        scanned = (
            None if inputs.corpus.scan is None else write_index(out.attempt, inputs.corpus.scan)
        )
        corpus = (
            apply_corpus(out.attempt, inputs.corpus.scan, inputs.corpus.index,
                         decided.decisions.corpus_kept, groups.n_removed)
            if options.apply
            else None
        )  # fmt: skip
        stable = inputs.stability
        summary = DedupSummary(
            output=options.output, dry_run=False, kept=n_kept, removed=n_removed,
            seconds=time.perf_counter() - start, corpus=corpus, changes=decided.changes,
            stable=None if stable.previous is None else stable.reason, **facts,
        )  # fmt: skip
        manifest = _report_and_manifest(out.attempt, inputs, decided, summary)
        if scanned is not None:
            manifest["corpus"]["index"] = scanned
        written = out.commit(manifest)
        return DedupResult(output=options.output, manifest=written, summary=summary)


def _facts(inputs: DedupInputs, grouped: Grouped, decided: Decided) -> dict:
    """What the summary says of a run, written or dry."""
    options, source, groups = inputs.options, inputs.source, decided.grouping
    sweeps = grouped.sweeps
    known = inputs.known
    return dict(
        threshold=options.threshold,
        keep=inputs.keep,
        rows_in=inputs.n,
        groups=groups.n_groups,
        largest=groups.largest,
        sweep=sweeps[0].points,
        limited=[source.limited(point.threshold) for point in sweeps[0].points],
        notes=source.notes + ([PINNED_NOTE] if decided.decisions.pinned.any() else []),
        method=options.method,
        radius=grouped.radius,
        sweeps=sweeps,
        target_precision=options.target_precision,
        copies=inputs.copies.n_copies if inputs.copies.n_copies else None,
        known=None if known is None else known_found(groups.group[: inputs.n], known),
        against=None if inputs.reference is None else inputs.reference.to_json(),
        group_sizes=size_distribution(groups.sizes),
        max_group_size=inputs.settings.max_group_size,
        split_groups=grouped.groups.split_groups,
        holds_threshold=grouped.holds_threshold,
        below_threshold=removed_below(groups, options.threshold, inputs.n),
        score_name=score_name(inputs.pairs_output),
    )


def score_name(pairs_output) -> str:
    """What the pairs' scores are: ``verify score`` for verified pairs, else ``cosine``."""
    verified = pairs_output is not None and pairs_output.manifest.get("verify") is not None
    return "verify score" if verified else "cosine"


def _write_lists(folder: str, inputs: DedupInputs, decided: Decided) -> tuple[int, int]:
    """``groups.parquet`` and the id lists; the counts are checked to add up."""
    groups, decisions, every_id = decided.grouping, decided.decisions, decided.every_id
    table = groups_parquet_table(
        every_id, groups, decisions.rank, groups.matched_score, decided.group_ids
    )
    if inputs.copies.n_copies:  # otherwise groups.parquet keeps its schema
        table = reason_column(table, every_id, groups.reason)
    if inputs.reference is not None:
        table = reference_column(table, every_id, decisions.reference_column())
    write_table(join(folder, GROUPS_FILE), table)
    n = inputs.n
    n_kept, n_removed = write_id_lists(
        folder, inputs.ids, decisions.corpus_kept, inputs.corpus.rank
    )
    if n_kept + n_removed != n or n_removed != groups.n_removed:
        raise JobFailedError(
            f"rows in ({n}) != kept ({n_kept}) + removed ({n_removed}; expected "
            f"{groups.n_removed}); {folder} has no manifest and must not be used"
        )
    return n_kept, n_removed


def _report_and_manifest(
    folder: str, inputs: DedupInputs, decided: Decided, summary: DedupSummary
) -> dict:
    """Write ``report.html``; return the manifest to commit."""
    options, source, groups, corpus = inputs.options, inputs.source, decided.grouping, inputs.corpus
    facts = {
        "pairs": options.pairs or "none (--against only)",
        "model": inputs.datasets[0].manifest.get("model_id"),
        "first means": corpus.order_basis,
        "texts from": corpus.text_source or "none (ids shown)",
    }
    # The histogram's bins are 0.01 wide and start at or below 0.99, so there is always a bin.
    histogram = similarity_histogram(source.pairs.scores, min(source.low, 0.99))
    views = largest_groups(groups, options.report_groups, decided.shown, decided.decisions.rank,
                           groups.matched_score, decided.texts, decided.group_ids)  # fmt: skip
    labelled = inputs.labelled
    known = _known_view(inputs, decided, summary)
    stable = inputs.stability.to_json(int(decided.decisions.pinned[: inputs.n].sum()))
    write_report_html(
        folder, summary, groups, facts, histogram, views,
        labelled.to_json() if labelled is not None else None, known,
        first_sections=[changes_html(summary.changes, stable)],
    )  # fmt: skip
    manifest = dedup_manifest(
        options, inputs.settings, inputs.pairs_output, inputs.datasets, source, groups,
        summary, histogram, labelled, known,
    )  # fmt: skip
    manifest["first_order"] = corpus.order_basis
    manifest["stable_keep"] = stable
    manifest["changes"] = summary.changes
    manifest["against"] = summary.against
    manifest["incremental"] = {"mode": "full", "reason": FULL_REASON}
    manifest["memory"] = {**inputs.memory, "peak_rss_bytes": peak_rss()}
    if inputs.copies.n_copies:
        manifest["exact_copies"] = inputs.copies.to_json()
    texts = decided.texts
    manifest["texts"] = {
        "source": corpus.text_source,
        "grouped": int(corpus.grouped.sum()),
        "found": len(texts),
    }
    return manifest


def _known_view(inputs: DedupInputs, decided: Decided, summary: DedupSummary) -> KnownView | None:
    """The known duplicates at the threshold as the report and the manifest show them."""
    if inputs.known is None:
        return None
    point = summary.at_threshold()  # labelled precision, when there are labels
    precision = None if point is None else point.precision
    source = inputs.source
    return known_view(
        inputs.known, decided.grouping.group, summary.method, precision, source.pairs,
        inputs.ids, decided.texts, source.low,
    )  # fmt: skip


def group_views(
    ids: Sequence[str] | np.ndarray,
    members: Sequence[np.ndarray],
    kept: np.ndarray,
    scores: np.ndarray,
    texts: dict[str, str],
    group_numbers: Sequence[int],
    sizes: Sequence[int],
) -> list[GroupView]:
    """Views of some groups.

    Args:
        ids: item ids (indexable by row).
        members: per shown group, the rows to show (representative first).
        kept: ``(n,)`` bool.
        scores: ``(n,)`` similarity to the representative (NaN: unknown or itself).
        texts: ``{id: text}`` where known.
        group_numbers, sizes: the shown groups' numbers and full sizes.
    """
    views = []
    for rows, number, size in zip(members, group_numbers, sizes, strict=True):
        shown = []
        for row in rows.tolist():
            item = str(ids[row])
            score = float(scores[row])
            shown.append(
                Member(item, texts.get(item), bool(kept[row]), None if math.isnan(score) else score)
            )
        views.append(GroupView(int(number), int(size), shown))
    return views
