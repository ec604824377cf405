"""The dedup stage's sections of ``report.html``: known-duplicate recall and the largest
duplicate groups side by side, the kept member first."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.grouping.model import CHAINED, CHAINED_MEANING
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import join, read_manifest
from sbert_pipeline.stage_api.job_stage import ReportContext
from sbert_pipeline.stage_api.report_parts import escape, link, member, relative, texts_of

# How much of each kind the page lists; everything else is one link away.
SHOWN_GROUPS = 10
SHOWN_MEMBERS = 8


def dedup_sections(context: ReportContext) -> list[str]:
    """Known-duplicate recall (when the corpus names its duplicates or dedup had labels) and
    the largest duplicate groups side by side."""
    folder, embeddings = context.outputs["dedup"], context.outputs.get("embed")
    with content_checks(context.verify):  # the embeddings' texts (see pairs_sections)
        return [_known_duplicates(folder), _duplicate_groups(context.job_dir, folder, embeddings)]


def _known_duplicates(dedup_dir: str) -> str:
    """How many known duplicate pairs ended in one group, from the dedup manifest."""
    try:
        known = read_manifest(dedup_dir, verify=False).get("known_duplicates")
    except (FileNotFoundError, ValueError):
        return ""
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


def _duplicate_groups(job_dir: str, dedup_dir: str, embed_dir: str | None) -> str:
    """The largest groups side by side: members with texts, the kept one first and marked."""
    path = join(dedup_dir, "groups.parquet")
    if not FileSystems.exists(path):
        return ""
    with FileSystems.open(path) as handle:
        table = pq.read_table(handle, columns=["id", "group", "is_representative", "score"])
    if table.num_rows == 0:
        return "<h2>Largest duplicate groups</h2><p>No duplicate groups at this threshold.</p>"
    sizes = pc.value_counts(table["group"])
    order = np.lexsort((sizes.field("values").to_numpy(), -sizes.field("counts").to_numpy()))[
        :SHOWN_GROUPS
    ]
    chosen = [sizes.field("values")[int(i)].as_py() for i in order]
    members = table.filter(pc.is_in(table["group"], value_set=pa.array(chosen, pa.int64())))
    texts = texts_of(embed_dir, set(members["id"].to_pylist()))
    cards = []
    for group in chosen:
        rows = members.filter(pc.equal(members["group"], group)).to_pylist()
        rows.sort(key=lambda row: (not row["is_representative"], -(row["score"] or 0), row["id"]))
        items = []
        for row in rows[:SHOWN_MEMBERS]:
            text = member(row["id"], texts.get(row["id"]))
            if row["is_representative"]:
                items.append(f'<li class="keep">{text} <span class="tag">kept</span></li>')
            else:
                score = CHAINED if row["score"] is None else f"{row['score']:.3f}"
                items.append(f'<li><span class="score">{score}</span> {text}</li>')
        hidden = len(rows) - SHOWN_MEMBERS
        more = f"<p class=meta>and {hidden} more</p>" if hidden > 0 else ""
        cards.append(
            f'<div class="group"><h3>group {group} · {len(rows)} items</h3>'
            f"<ol>{''.join(items)}</ol>{more}</div>"
        )
    return (
        f"<h2>Largest duplicate groups</h2><p>The {len(chosen)} largest groups; the kept "
        f"member first, the others with their cosine similarity to it ({CHAINED}: "
        f"{escape(CHAINED_MEANING)}). All groups: "
        f"{link(relative(job_dir, dedup_dir), 'groups.parquet')}; the dedup "
        f"stage's own report: {link(relative(job_dir, dedup_dir), 'report.html')}.</p>"
        f'<div class="groups">{"".join(cards)}</div>'
    )
