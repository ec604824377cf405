"""The dedup stage's sections of ``report.html``, what a reader needs to trust the result and
tune the threshold: the figures (rows removed and their share, the largest group, how many
groups of each size), the known-duplicate recall, the threshold sweep, the groups nearest the
threshold and the largest groups side by side, the kept member first."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.dedup.report import sweep_svg
from sbert_pipeline.grouping.model import CHAINED, CHAINED_MEANING
from sbert_pipeline.grouping.sizes import size_distribution
from sbert_pipeline.grouping.sweep import SweepPoint
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import join, read_manifest
from sbert_pipeline.stage_api.job_stage import ReportContext
from sbert_pipeline.stage_api.report_parts import escape, link, member, relative, texts_of

# How much of each kind the page lists; everything else is one link away.
SHOWN_GROUPS = 10
SHOWN_MEMBERS = 8
# Of a group near the threshold, the members least similar to the kept one.
SHOWN_WEAKEST = 4
_GROUPS_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("group", pa.int64()),
        ("is_representative", pa.bool_()),
        ("score", pa.float32()),
    ]
)


def dedup_sections(context: ReportContext) -> list[str]:
    """The dedup figures, known-duplicate recall (when the corpus names its duplicates or
    dedup had labels), the threshold sweep, and the groups nearest the threshold and the
    largest groups side by side."""
    folder, embeddings = context.outputs["dedup"], context.outputs.get("embed")
    manifest = _manifest(folder)
    threshold = manifest.get("threshold")
    if threshold is None:
        threshold = context.options["dedup"].threshold
    where = relative(context.job_dir, folder)
    with content_checks(context.verify):  # the embeddings' texts (see pairs_sections)
        table = _groups(folder)
        nearest = _nearest_groups(table, threshold)
        largest = _largest_groups(table)
        wanted = pc.is_in(table["group"], value_set=pa.array(nearest + largest, pa.int64()))
        texts = texts_of(embeddings, set(table.filter(wanted)["id"].to_pylist()))
    return [
        _figures(where, manifest, table),
        _known_duplicates(manifest),
        _sweep(where, manifest, threshold),
        _nearest_section(where, table, nearest, texts, threshold),
        _largest_section(where, table, largest, texts),
    ]


def _manifest(dedup_dir: str) -> dict:
    """The dedup manifest; empty when it cannot be read (the sections then say less)."""
    try:
        return read_manifest(dedup_dir, verify=False)
    except (FileNotFoundError, ValueError):
        return {}


def _groups(dedup_dir: str) -> pa.Table:
    """Every grouped row (id, group, kept or not, score to the kept row); none without a file."""
    path = join(dedup_dir, "groups.parquet")
    if not FileSystems.exists(path):
        return _GROUPS_SCHEMA.empty_table()
    with FileSystems.open(path) as handle:
        return pq.read_table(handle, columns=_GROUPS_SCHEMA.names)


def _figures(where: str, manifest: dict, table: pa.Table) -> str:
    """Rows removed and their share, groups, the largest group and the group sizes."""
    counts = manifest.get("counts", {})
    if not counts:
        return ""
    rows, removed = counts.get("rows_in", 0), counts.get("removed", 0)
    share = _fact(manifest, "removed_share")
    if share is None:
        share = removed / rows if rows else 0.0
    group_sizes = pc.value_counts(table["group"]).field("counts").to_numpy()
    largest = _fact(manifest, "largest_group")
    if largest is None:
        largest = int(group_sizes.max()) if len(group_sizes) else 0
    sizes = _fact(manifest, "group_sizes")
    if not isinstance(sizes, Mapping):  # a manifest from before dedup counted them
        sizes = size_distribution(group_sizes)
    setting = ", ".join(
        f"{name} {escape(str(manifest[name]))}" for name in ("method", "keep") if name in manifest
    )
    text = (
        f"<h2>Duplicates</h2><p>At threshold {manifest.get('threshold', 0):g}"
        f"{f' ({setting})' if setting else ''}, <b>{removed:,} of {rows:,} rows removed "
        f"({share:.1%})</b> in {counts.get('groups', len(group_sizes)):,} groups; each group "
        f"keeps one row. Largest group: <b>{largest:,} rows</b>.</p>"
    )
    if sizes:
        cells = "".join(
            f"<tr><td class=num>{escape(str(size))}</td><td class=num>{int(n):,}</td></tr>"
            for size, n in sizes.items()
        )
        text += f"<table><tr><th>group size (rows)</th><th>groups</th></tr>{cells}</table>"
    return text + (
        f"<p>All groups: {link(where, 'groups.parquet')}; the removed ids: "
        f"{link(where, 'removed_ids.txt')}; the dedup stage's own report: "
        f"{link(where, 'report.html')}.</p>"
    )


def _fact(manifest: dict, key: str):
    """A figure of the dedup manifest, at its top level or among its counts (None: absent)."""
    value = manifest.get(key)
    return value if value is not None else manifest.get("counts", {}).get(key)


def _sweep(where: str, manifest: dict, threshold: float) -> str:
    """Rows removed at each threshold of the sweep, the threshold used marked."""
    names = [field.name for field in fields(SweepPoint)]
    try:
        points = [
            SweepPoint(**{name: point[name] for name in names}) for point in manifest["sweep"]
        ]
    except (KeyError, TypeError):  # no sweep, or one of another shape
        return ""
    if not points:
        return ""
    return (
        f"<h2>Threshold sweep</h2><p>Rows removed at each threshold (method "
        f"{escape(str(manifest.get('method', '')))}); the dashed line marks the threshold used, "
        f"{threshold:g}. Groups and the largest group at each threshold: "
        f"{link(where, 'report.html')}.</p>" + sweep_svg(points, threshold)
    )


def _known_duplicates(manifest: dict) -> str:
    """How many known duplicate pairs ended in one group, from the dedup manifest."""
    known = manifest.get("known_duplicates")
    if not known:
        return ""
    at = known["at_threshold"]
    where = (
        f"the corpus field <code>{escape(known['field'])}</code>"
        if known["source"] == "field"
        else f"the labelled duplicates of <code>{escape(known['file'])}</code>"
    )
    precision = at.get("labelled_precision")
    also = f"; precision on the labelled pairs {precision:.3f}" if precision is not None else ""
    rows = "".join(
        f"<tr><td>{escape(m['method'])}</td>"
        + "".join(
            f'<td class="num">{p["recall"]:.3f} ({p["found"]})</td>'
            for p in m["points"]
            if p["threshold"] == known["threshold"]
        )
        + "</tr>"
        for m in known.get("methods", [])
    )
    table = (
        f"<table><tr><th>method</th><th>recall (found) at {known['threshold']:g}</th></tr>"
        f"{rows}</table>"
        if rows
        else ""
    )
    return (
        f"<h2>Known duplicates</h2><p>Of the {known['pairs']} known duplicate pairs ({where}), "
        f"<b>{at['found']} ended in one group</b> at threshold {known['threshold']:g} "
        f"(method {escape(known['method'])}): recall {at['recall']:.3f}{also}.</p>{table}"
    )


def _largest_groups(table: pa.Table) -> list[int]:
    """The SHOWN_GROUPS largest groups, largest first (equal sizes: lower group first)."""
    sizes = pc.value_counts(table["group"])
    values, counts = sizes.field("values").to_numpy(), sizes.field("counts").to_numpy()
    return [int(values[i]) for i in np.lexsort((values, -counts))[:SHOWN_GROUPS]]


def _nearest_groups(table: pa.Table, threshold: float) -> list[int]:
    """The SHOWN_GROUPS groups whose lowest-scoring member's score to the kept row is nearest
    the threshold (equal distances: lower group first); chained members have no score."""
    scored = table.filter(
        pc.and_(pc.invert(table["is_representative"]), pc.is_valid(table["score"]))
    )
    weakest = scored.group_by("group").aggregate([("score", "min")])
    groups = weakest["group"].to_numpy()
    distance = np.abs(weakest["score_min"].to_numpy().astype(np.float64) - threshold)
    return [int(groups[i]) for i in np.lexsort((groups, distance))[:SHOWN_GROUPS]]


def _nearest_section(
    where: str, table: pa.Table, chosen: list[int], texts: dict[str, str], threshold: float
) -> str:
    if not chosen:
        return ""
    cards = []
    for group in chosen:
        kept, others = _members(table, group)
        others.sort(key=lambda row: (row["score"] is None, row["score"] or 0, row["id"]))
        lowest = min(row["score"] for row in others if row["score"] is not None)
        shown = kept + others[:SHOWN_WEAKEST]
        cards.append(_card(group, len(kept) + len(others), shown, texts, f"lowest {lowest:.3f}"))
    return (
        f"<h2>Groups nearest the threshold</h2><p>The {len(chosen)} groups whose least similar "
        f"member is nearest the threshold {threshold:g}: the kept member first, then up to "
        f"{SHOWN_WEAKEST} members, the least similar to it first. Rows that are not "
        "duplicates of the kept one here ask for a higher threshold; groups that all look "
        "right allow a lower one (the sweep shows what each would remove). All groups: "
        f"{link(where, 'groups.parquet')}.</p>"
        f'<div class="groups">{"".join(cards)}</div>'
    )


def _largest_section(where: str, table: pa.Table, chosen: list[int], texts: dict[str, str]) -> str:
    if not chosen:
        return "<h2>Largest duplicate groups</h2><p>No duplicate groups at this threshold.</p>"
    cards = []
    for group in chosen:
        kept, others = _members(table, group)
        others.sort(key=lambda row: (-(row["score"] or 0), row["id"]))
        shown = (kept + others)[:SHOWN_MEMBERS]
        cards.append(_card(group, len(kept) + len(others), shown, texts))
    return (
        f"<h2>Largest duplicate groups</h2><p>The {len(chosen)} largest groups; the kept "
        f"member first, the others with their similarity to it ({CHAINED}: "
        f"{escape(CHAINED_MEANING)}). All groups: {link(where, 'groups.parquet')}; the dedup "
        f"stage's own report: {link(where, 'report.html')}.</p>"
        f'<div class="groups">{"".join(cards)}</div>'
    )


def _members(table: pa.Table, group: int) -> tuple[list[dict], list[dict]]:
    """A group's kept member(s) and its other members, as rows."""
    rows = table.filter(pc.equal(table["group"], group)).to_pylist()
    kept = sorted((row for row in rows if row["is_representative"]), key=lambda row: row["id"])
    return kept, [row for row in rows if not row["is_representative"]]


def _card(group: int, size: int, rows: list[dict], texts: dict[str, str], note: str = "") -> str:
    """One group: the rows given (kept first), with how many more it has."""
    items = []
    for row in rows:
        text = member(row["id"], texts.get(row["id"]))
        if row["is_representative"]:
            items.append(f'<li class="keep">{text} <span class="tag">kept</span></li>')
        else:
            score = CHAINED if row["score"] is None else f"{row['score']:.3f}"
            items.append(f'<li><span class="score">{score}</span> {text}</li>')
    hidden = size - len(rows)
    more = f"<p class=meta>and {hidden} more</p>" if hidden > 0 else ""
    title = f"group {group} · {size} items" + (f" · {note}" if note else "")
    return f'<div class="group"><h3>{title}</h3><ol>{"".join(items)}</ol>{more}</div>'
