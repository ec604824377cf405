"""The stage sections of ``report.html`` (``sbert run``), and the page's HTML helpers.

Each function renders one stage's part of the report from that stage's output folder; the stage
table (``jobs/run_table.py``) says which stage shows which. Every text from the data is
HTML-escaped, and every link is relative to the job directory.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from pipelines.dedup.terms import CHAINED, CHAINED_MEANING
from pipelines.io.content_checks import content_checks
from pipelines.io.html import SIMILARITY_AXIS, SIZE_AXIS, Bins, histogram_svg, shown_text
from pipelines.io.output_dir import join, read_manifest
from pipelines.io.pairs_output import PairsOutput

# How much of each kind the page lists; everything else is one link away.
SHOWN_GROUPS = 10
SHOWN_MEMBERS = 8
SHOWN_CLUSTERS = 8


@dataclass(frozen=True)
class ReportContext:
    """What a stage's report section is rendered from."""

    # The job's RunConfig: jobs/run_config.py builds on the stage table, which builds on this
    # module, so the type is not imported here.
    config: Any
    job_dir: str
    outputs: dict[str, str]  # stage -> its output folder, for the stages of this job


def cluster_sections(context: ReportContext) -> list[str]:
    """The cluster-size histogram and the largest clusters."""
    folder = context.outputs["cluster"]
    return [_cluster_sizes(folder), _clusters(context.job_dir, folder)]


def pairs_sections(context: ReportContext) -> list[str]:
    """The histogram of the similar pairs' scores, with the dedup threshold when dedup runs."""
    config = context.config
    threshold = config.dedup.threshold if "dedup" in context.outputs else None
    # Files the stages checked are not hashed again (the check remembers them); with
    # verify: false the report does not check them either.
    with content_checks(config.verify):
        return [_similarity(context.outputs["pairs"], config.pairs.threshold, threshold)]


def dedup_sections(context: ReportContext) -> list[str]:
    """Known-duplicate recall (when the corpus names its duplicates or dedup had labels) and
    the largest duplicate groups side by side."""
    folder, embeddings = context.outputs["dedup"], context.outputs.get("embed")
    with content_checks(context.config.verify):  # the embeddings' texts (see pairs_sections)
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


def _cluster_sizes(cluster_dir: str) -> str:
    sizes = _read_column(join(cluster_dir, "summary.parquet"), "size")
    if sizes is None:
        return ""
    if len(sizes) == 0:
        return "<h2>Cluster sizes</h2><p>No clusters.</p>"
    return (
        f"<h2>Cluster sizes</h2><p>{len(sizes)} clusters, {int(sizes.sum())} items clustered; "
        f"smallest {int(sizes.min())}, largest {int(sizes.max())}.</p>"
        + histogram_svg(Bins.of(sizes, integer=True), SIZE_AXIS, "clusters")
    )


def _similarity(pairs_dir: str, low: float, dedup_threshold: float | None) -> str:
    """Histogram of the similar pairs' scores, streamed (bounded memory), with the dedup cut."""
    bins = Bins.round(low, 1.0)
    above = 0
    # Compared in float32, as the pairs and dedup stages compare scores with thresholds.
    cut_at = np.float32(dedup_threshold if dedup_threshold is not None else np.inf)
    for path in PairsOutput.open(pairs_dir).pair_files:
        with FileSystems.open(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(columns=["score"]):
                scores = batch.column("score").to_numpy(zero_copy_only=False)
                bins.add(scores)
                above += int(np.count_nonzero(scores >= cut_at))
    cut = ""
    if dedup_threshold is not None:
        cut = (
            f" The dashed line marks the dedup threshold {dedup_threshold:g}: {above} pairs are "
            "at or above it."
        )
    return (
        f"<h2>Pair similarity</h2><p>{int(bins.counts.sum())} pairs with cosine similarity "
        f">= {low:g}.{cut}</p>"
        + histogram_svg(bins, SIMILARITY_AXIS, "pairs", marker=dedup_threshold)
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
    texts = _texts(embed_dir, set(members["id"].to_pylist()))
    cards = []
    for group in chosen:
        rows = members.filter(pc.equal(members["group"], group)).to_pylist()
        rows.sort(key=lambda row: (not row["is_representative"], -(row["score"] or 0), row["id"]))
        items = []
        for row in rows[:SHOWN_MEMBERS]:
            text = _member(row["id"], texts.get(row["id"]))
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


def _clusters(job_dir: str, cluster_dir: str) -> str:
    """The largest clusters with their distinctive terms and the members nearest the centre."""
    path = join(cluster_dir, "summary.parquet")
    if not FileSystems.exists(path):
        return ""
    with FileSystems.open(path) as handle:
        rows = pq.read_table(handle).to_pylist()
    rows.sort(key=lambda row: (-row["size"], row["cluster"]))
    body = []
    for row in rows[:SHOWN_CLUSTERS]:
        members = "".join(
            f'<li><span class="score">{score:.3f}</span> {_member(id_, text)}</li>'
            for id_, score, text in zip(
                row["representative_ids"],
                row["representative_scores"],
                row["representative_texts"],
                strict=True,
            )
        )
        body.append(
            f"<tr><td class=num>{row['cluster']}</td><td class=num>{row['size']}</td>"
            f"<td>{escape(', '.join(row['terms']))}</td><td><ol>{members}</ol></td></tr>"
        )
    return (
        f"<h2>Largest clusters</h2><p>{min(len(rows), SHOWN_CLUSTERS)} of {len(rows)} clusters; "
        f"all of them: {link(relative(job_dir, cluster_dir), 'report.html')}.</p>"
        "<table><tr><th>cluster</th><th>size</th><th>distinctive terms</th>"
        f"<th>members nearest the centre (cosine)</th></tr>{''.join(body)}</table>"
    )


def link(*parts: str) -> str:
    """A relative link to a file of the job directory, showing its path."""
    target = escape("/".join(parts))
    return f'<a href="{target}">{target}</a>'


def _texts(embed_dir: str | None, wanted: set[str]) -> dict[str, str]:
    """Texts of the wanted ids from the embeddings (when they were kept), else none."""
    from pipelines.io.embeddings import EmbeddingsDataset
    from pipelines.io.texts import texts_from_embeddings

    if embed_dir is None or not wanted:
        return {}
    try:
        dataset = EmbeddingsDataset.open(embed_dir)
    except (FileNotFoundError, ValueError):
        return {}
    return texts_from_embeddings([dataset], wanted)


def _read_column(path: str, column: str) -> np.ndarray | None:
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as handle:
        return pq.read_table(handle, columns=[column]).column(column).to_numpy()


def _member(id_: str, text: str | None) -> str:
    """A member's text (cut to REPORT_TEXT_CHARS) with its id, or its id alone."""
    label = f'<code title="id">{escape(id_)}</code>'
    if text is None:
        return label
    return f"{shown_text(text)} {label}"


def relative(job_dir: str, path: str) -> str:
    """``path`` relative to the job directory, with ``/`` separators (a link target)."""
    base = job_dir.rstrip("/") + "/"
    if path.startswith(base):
        return path[len(base) :]
    if "://" not in path:
        return os.path.relpath(path, job_dir).replace(os.sep, "/")
    return path


def escape(text: str) -> str:
    return html.escape(str(text), quote=True)
