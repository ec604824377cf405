"""The job's ``report.html``: one self-contained page for everything ``sbert run`` produced.

It shows the counts per stage (read, embedded, rejected, clusters, pairs, duplicate groups,
removed), each stage's status and time, the cluster-size histogram and the pair-similarity
histogram (inline SVG), the largest duplicate groups side by side and the largest clusters with
their distinctive terms, and relative links to every output. No script, stylesheet, font or
image is loaded from anywhere: it opens from disk with no server and no network. Every text from
the data is HTML-escaped.

Numbers come from the outputs themselves (manifests, Parquet footers, ``summary.parquet``,
``groups.parquet``), so a report written after a rerun that skipped every stage shows the same
data as the first one.
"""

from __future__ import annotations

import html
import os
import posixpath
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems

from jobs.run_config import CONFIG_COPY, STAGE_DIRS, STATE_FILE
from pipelines.cluster_summary import REPORT_TEXT_CHARS, size_histogram_svg, write_text
from pipelines.output_dir import join, list_files

if TYPE_CHECKING:
    from jobs.run import StageResult
    from jobs.run_config import RunConfig
    from jobs.run_stages import StagePlan

REPORT_FILE = "report.html"
# How much of each kind the page lists; everything else is one link away.
SHOWN_GROUPS = 10
SHOWN_MEMBERS = 8
SHOWN_CLUSTERS = 8
SHOWN_FILES = 12
SIMILARITY_BINS = 40

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5em 2em;
       max-width: 76em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ccc; }
.meta { color: #555; }
.counts { display: flex; flex-wrap: wrap; gap: 0.6em; margin: 1em 0; }
.count { border: 1px solid #d6dce4; border-radius: 6px; padding: 0.4em 0.8em; min-width: 6em;
         background: #f7f9fb; }
.count b { display: block; font-size: 1.5em; }
.count span { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.5em 0; }
td, th { border-bottom: 1px solid #e2e2e2; padding: 4px 8px; text-align: left;
         vertical-align: top; }
th { background: #f3f5f7; }
.ran { color: #1a7f37; font-weight: bold; } .skipped { color: #555; }
.failed { color: #c62828; font-weight: bold; } .not-run { color: #999; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.groups { display: grid; grid-template-columns: repeat(auto-fill, minmax(22em, 1fr));
          gap: 0.8em; }
.group { border: 1px solid #d6dce4; border-radius: 6px; padding: 0.5em 0.8em; }
.group h3 { font-size: 1em; margin: 0 0 0.4em 0; }
.group ol { margin: 0; padding-left: 1.3em; }
.keep { font-weight: bold; } .tag { color: #1a7f37; font-size: 0.8em; }
.score { color: #777; font-size: 0.85em; font-variant-numeric: tabular-nums; }
code { font-size: 0.9em; } .error { color: #c62828; }
ul.files { columns: 2; } svg { max-width: 100%; height: auto; }
"""


def write_report(
    config: RunConfig, plans: Sequence[StagePlan], results: Sequence[StageResult], path: str
) -> str:
    """Render the report from the job directory's outputs and write it to ``path``.

    Returns:
        ``path``.
    """
    write_text(path, render_report(config, plans, results))
    return path


def render_report(
    config: RunConfig, plans: Sequence[StagePlan], results: Sequence[StageResult]
) -> str:
    """The report page as a string (see the module docstring)."""
    by_stage = {plan.name: plan for plan in plans}
    outputs = {name: plan.output for name, plan in by_stage.items()}
    facts = {result.name: result.facts for result in results}
    sections = [
        _header(config),
        _counts(facts),
        _stage_table(config.job_dir, results),
    ]
    if "cluster" in outputs and facts.get("cluster"):
        sections.append(_cluster_sizes(outputs["cluster"]))
    if "pairs" in outputs and facts.get("pairs"):
        threshold = config.dedup.threshold if "dedup" in outputs else None
        sections.append(_similarity(outputs["pairs"], config.pairs.threshold, threshold))
    if "dedup" in outputs and facts.get("dedup"):
        sections.append(_duplicate_groups(outputs["dedup"], outputs.get("embed")))
    if "cluster" in outputs and facts.get("cluster"):
        sections.append(_clusters(outputs["cluster"]))
    sections.append(_links(config.job_dir, plans))
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>sbert run: {_e(_job_name(config.job_dir))}</title>"
        f"<style>{_STYLE}</style></head><body>\n"
        + "\n".join(sections)
        + f'\n<p class="meta">Generated {generated} by sbert run.</p>\n</body></html>\n'
    )


def _header(config: RunConfig) -> str:
    stages = ", ".join(config.ordered_stages())
    return (
        f"<h1>sbert run: {_e(_job_name(config.job_dir))}</h1>"
        f'<p class="meta">Corpus <code>{_e(config.input.path)}</code> · model '
        f"<code>{_e(config.model)}</code> · runner {_e(config.runner)} · stages {_e(stages)} · "
        f"effective config {_link(CONFIG_COPY)}</p>"
    )


def _counts(facts: dict[str, dict]) -> str:
    """The headline numbers, one box each, for the stages that have an output."""
    wanted = [
        ("embed", "read", "rows read"),
        ("embed", "embedded", "embedded"),
        ("embed", "rejected", "rejected"),
        ("cluster", "clusters", "clusters"),
        ("pairs", "pairs", "similar pairs"),
        ("dedup", "groups", "duplicate groups"),
        ("dedup", "removed", "removed"),
        ("dedup", "kept", "kept"),
    ]
    boxes = [
        f'<div class="count"><b>{_number(facts[stage][key])}</b><span>{_e(label)}</span></div>'
        for stage, key, label in wanted
        if key in facts.get(stage, {})
    ]
    return f'<h2>Counts</h2><div class="counts">{"".join(boxes)}</div>'


def _stage_table(job_dir: str, results: Sequence[StageResult]) -> str:
    rows = []
    for result in results:
        if result.status == "skipped":
            shown = f"({_seconds(result.recorded_seconds)})"
        else:
            shown = _seconds(result.seconds)
        counts = ", ".join(f"{k} {_number(v)}" for k, v in result.facts.items())
        if result.error:
            counts = f"{counts} " if counts else ""
            counts += f'<span class="error">{_e(result.error)}</span>'
        folder = _relative(job_dir, result.output)
        css = result.status.replace(" ", "-")
        rows.append(
            f"<tr><td>{_e(result.name)}</td><td class={css}>{_e(result.status)}</td>"
            f"<td class=num>{_e(shown)}</td><td>{counts if result.error else _e(counts)}</td>"
            f'<td><a href="{_e(folder)}/">{_e(folder)}/</a></td></tr>'
        )
    note = ""
    if any(result.status == "skipped" for result in results):
        note = (
            '<p class="meta">A skipped stage\'s inputs and parameters were unchanged and its '
            "output is the one its last run wrote; its time (in brackets) is that run's.</p>"
        )
    return (
        "<h2>Stages</h2><table><tr><th>stage</th><th>status</th><th>time</th><th>counts</th>"
        f"<th>output</th></tr>{''.join(rows)}</table>{note}"
    )


def _cluster_sizes(cluster_dir: str) -> str:
    sizes = _read_column(join(cluster_dir, "summary.parquet"), "size")
    if sizes is None:
        return ""
    if len(sizes) == 0:
        return "<h2>Cluster sizes</h2><p>No clusters.</p>"
    return (
        f"<h2>Cluster sizes</h2><p>{len(sizes)} clusters, {int(sizes.sum())} items clustered; "
        f"smallest {int(sizes.min())}, largest {int(sizes.max())}.</p>{size_histogram_svg(sizes)}"
    )


def _similarity(pairs_dir: str, low: float, dedup_threshold: float | None) -> str:
    """Histogram of the similar pairs' scores, streamed (bounded memory), with the dedup cut."""
    edges = np.linspace(low, 1.0, SIMILARITY_BINS + 1)
    counts = np.zeros(SIMILARITY_BINS, np.int64)
    above = 0
    # Compared in float32, as the pairs and dedup stages compare scores with thresholds.
    cut_at = np.float32(dedup_threshold if dedup_threshold is not None else np.inf)
    for path in _parquet_files(join(pairs_dir, "pairs")):
        with FileSystems.open(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(columns=["score"]):
                scores = batch.column("score").to_numpy(zero_copy_only=False)
                counts += np.histogram(np.clip(scores, low, 1.0), bins=edges)[0]
                above += int(np.count_nonzero(scores >= cut_at))
    cut = ""
    if dedup_threshold is not None:
        cut = (
            f" The dashed line marks the dedup threshold {dedup_threshold:g}: {above} pairs are "
            "at or above it."
        )
    return (
        f"<h2>Pair similarity</h2><p>{int(counts.sum())} pairs with cosine similarity "
        f">= {low:g}.{cut}</p>"
        + histogram_svg(counts, edges, "cosine similarity", "pairs", marker=dedup_threshold)
    )


def histogram_svg(
    counts: np.ndarray,
    edges: np.ndarray,
    x_label: str,
    y_label: str,
    *,
    marker: float | None = None,
    width: int = 640,
    height: int = 260,
) -> str:
    """An SVG bar chart of binned counts, axes labelled, with an optional vertical marker."""
    left, right, top, bottom = 56, 16, 16, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    tallest = max(int(np.max(counts, initial=0)), 1)
    low, high = float(edges[0]), float(edges[-1])
    span = (high - low) or 1.0

    def x_of(value: float) -> float:
        return left + plot_w * (value - low) / span

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(y_label)} by {_e(x_label)}">',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#333"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#333"/>',
    ]
    for i, count in enumerate(counts):
        x0, x1 = x_of(float(edges[i])), x_of(float(edges[i + 1]))
        bar_h = plot_h * int(count) / tallest
        parts.append(
            f'<rect x="{x0 + 0.5:.1f}" y="{top + plot_h - bar_h:.1f}" '
            f'width="{max(x1 - x0 - 1, 0.5):.1f}" height="{bar_h:.1f}" fill="#4c78a8">'
            f"<title>{edges[i]:.3f}-{edges[i + 1]:.3f}: {int(count)}</title></rect>"
        )
    for value in np.linspace(low, high, 5):
        parts.append(
            f'<text x="{x_of(value):.1f}" y="{top + plot_h + 16}" font-size="11" '
            f'text-anchor="middle">{value:.2f}</text>'
        )
    if marker is not None and low <= marker <= high:
        x = x_of(marker)
        parts.append(
            f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#c62828" '
            'stroke-width="2" stroke-dasharray="5,3"/>'
            f'<text x="{x - 4:.1f}" y="{top + 10}" font-size="11" fill="#c62828" '
            f'text-anchor="end">threshold {marker:g}</text>'
        )
    parts += [
        f'<text x="{left - 6}" y="{top + 10}" font-size="11" text-anchor="end">{tallest}</text>',
        f'<text x="{left - 6}" y="{top + plot_h}" font-size="11" text-anchor="end">0</text>',
        f'<text x="{left + plot_w / 2}" y="{height - 8}" font-size="12" text-anchor="middle">'
        f"{_e(x_label)}</text>",
        f'<text x="14" y="{top + plot_h / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2})">{_e(y_label)}</text>',
        "</svg>",
    ]
    return "\n".join(parts)


def _duplicate_groups(dedup_dir: str, embed_dir: str | None) -> str:
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
                score = "" if row["score"] is None else f"{row['score']:.3f} "
                items.append(f'<li><span class="score">{score}</span>{text}</li>')
        hidden = len(rows) - SHOWN_MEMBERS
        more = f"<p class=meta>and {hidden} more</p>" if hidden > 0 else ""
        cards.append(
            f'<div class="group"><h3>group {group} · {len(rows)} items</h3>'
            f"<ol>{''.join(items)}</ol>{more}</div>"
        )
    return (
        f"<h2>Largest duplicate groups</h2><p>The {len(chosen)} largest groups; the kept "
        "member first, the others with their similarity to it (blank: joined through another "
        f"member). All groups: {_link(STAGE_DIRS['dedup'], 'groups.parquet')}; the dedup "
        f"stage's own report: {_link(STAGE_DIRS['dedup'], 'report.html')}.</p>"
        f'<div class="groups">{"".join(cards)}</div>'
    )


def _clusters(cluster_dir: str) -> str:
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
            f"<td>{_e(', '.join(row['terms']))}</td><td><ol>{members}</ol></td></tr>"
        )
    return (
        f"<h2>Largest clusters</h2><p>{min(len(rows), SHOWN_CLUSTERS)} of {len(rows)} clusters; "
        f"all of them: {_link(STAGE_DIRS['cluster'], 'report.html')}.</p>"
        "<table><tr><th>cluster</th><th>size</th><th>distinctive terms</th>"
        f"<th>members nearest the centre (cosine)</th></tr>{''.join(body)}</table>"
    )


def _links(job_dir: str, plans: Sequence[StagePlan]) -> str:
    """Relative links to every file of every stage output (long shard lists are cut)."""
    sections = []
    for plan in plans:
        files = sorted(_relative(job_dir, path) for path in list_files(plan.output))
        if not files:
            continue
        shown = files[:SHOWN_FILES]
        items = "".join(f'<li><a href="{_e(name)}">{_e(name)}</a></li>' for name in shown)
        if len(files) > len(shown):
            items += f"<li>and {len(files) - len(shown)} more files</li>"
        sections.append(f"<h3>{_e(plan.name)}</h3><ul class=files>{items}</ul>")
    extra = (
        f"<p>{_link(CONFIG_COPY)} (the effective config) · {_link(STATE_FILE)} (what each "
        "stage last ran with)</p>"
    )
    return "<h2>Outputs</h2>" + extra + "".join(sections)


def _link(*parts: str) -> str:
    """A relative link to a file of the job directory, showing its path."""
    target = _e("/".join(parts))
    return f'<a href="{target}">{target}</a>'


def _texts(embed_dir: str | None, wanted: set[str]) -> dict[str, str]:
    """Texts of the wanted ids from the embeddings (when they were kept), else none."""
    from pipelines.cluster_summary import texts_from_embeddings
    from pipelines.embeddings_io import EmbeddingsDataset

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


def _parquet_files(directory: str) -> list[str]:
    if not FileSystems.exists(directory):
        return []
    pattern = join(directory, "*.parquet")
    return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


def _member(id_: str, text: str | None) -> str:
    """A member's text (cut to REPORT_TEXT_CHARS) with its id, or its id alone."""
    label = f'<code title="id">{_e(id_)}</code>'
    if text is None:
        return label
    if len(text) > REPORT_TEXT_CHARS:
        text = text[: REPORT_TEXT_CHARS - 1] + "\u2026"
    return f"{_e(text)} {label}"


def _relative(job_dir: str, path: str) -> str:
    """``path`` relative to the job directory, with ``/`` separators (a link target)."""
    base = job_dir.rstrip("/") + "/"
    if path.startswith(base):
        return path[len(base) :]
    if "://" not in path:
        return os.path.relpath(path, job_dir).replace(os.sep, "/")
    return path


def _job_name(job_dir: str) -> str:
    return posixpath.basename(job_dir.rstrip("/")) or job_dir


def _number(value) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _e(str(value))
    if isinstance(value, float):
        return f"{value:.3f}"
    return f"{value:,}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
