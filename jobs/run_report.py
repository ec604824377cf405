"""The job's ``report.html``: one self-contained page for everything ``sbert run`` produced.

A table of contents, the headline counts (read, embedded, rejected, clusters, pairs, duplicate
groups, removed), then each stage's own sections (each rendered by its stage's
``report_section.py``) from the last stage back to the first: what the job ends in comes first
(when dedup ran, its figures, sweep and groups), then what it was made from (the verified and
the similar pairs, the clusters). Then each stage's status, time and output folder, and, folded
away in "Run details", what only the one who runs the job needs: each stage's peak memory and
every file of every output (part names carry run ids).
No script, stylesheet, font or image is loaded from anywhere: it opens from disk with no server
and no network. Every text from the data is HTML-escaped.

Numbers come from the outputs themselves (manifests, Parquet footers, ``summary.parquet``,
``groups.parquet``), so a report written after a rerun that skipped every stage shows the same
data as the first one.
"""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Sequence

from sbert_pipeline.io.html import write_text
from sbert_pipeline.io.output_dir import list_files
from sbert_pipeline.jobs.run_config import CONFIG_COPY, STATE_FILE, RunConfig
from sbert_pipeline.jobs.run_stages import StagePlan, StageResult
from sbert_pipeline.jobs.run_table import STAGES
from sbert_pipeline.stage_api.job_stage import ReportContext
from sbert_pipeline.stage_api.report_parts import escape as _e
from sbert_pipeline.stage_api.report_parts import link, relative

REPORT_FILE = "report.html"
# How many files of a stage output the page lists; everything else is one link away.
SHOWN_FILES = 12

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
nav.contents { border: 1px solid #d6dce4; border-radius: 6px; padding: 0.3em 1.2em;
               background: #f7f9fb; display: inline-block; }
nav.contents h2 { margin: 0.3em 0; border: none; font-size: 1.1em; }
nav.contents ol { columns: 2; column-gap: 4em; margin: 0.2em 0 0.4em 0; }
nav.contents li { white-space: nowrap; }
details { margin-top: 1.6em; } details > summary { font-size: 1.3em; font-weight: bold;
                                                   cursor: pointer; }
"""
# A section's title: every section of the page starts with one (stage sections included).
_HEADING = re.compile(r"<h2>(.*?)</h2>", re.DOTALL)
_DETAILS_ID = "run-details"


def write_job_report(
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
    options = {name: plan.options for name, plan in by_stage.items()}
    context = ReportContext(config.job_dir, outputs, options, config.verify)
    sections = [_counts(facts)]
    # The last stage's sections first: what the job ends in, then what it was made from.
    for spec in reversed(STAGES):
        if spec.report is not None and spec.name in outputs and facts.get(spec.name):
            sections += spec.report(context)
    sections.append(_stage_table(config.job_dir, results))
    body, contents = _titled("\n".join(section for section in sections if section))
    details = _run_details(config.job_dir, plans, results)
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>sbert run: {_e(_job_name(config.job_dir))}</title>"
        f"<style>{_STYLE}</style></head><body>\n"
        + "\n".join([_header(config), contents, body, details])
        + f'\n<p class="meta">Generated {generated} by sbert run.</p>\n</body></html>\n'
    )


def _header(config: RunConfig) -> str:
    stages = ", ".join(config.ordered_stages())
    return (
        f"<h1>sbert run: {_e(_job_name(config.job_dir))}</h1>"
        f'<p class="meta">Corpus <code>{_e(config.input.path)}</code> · model '
        f"<code>{_e(config.model)}</code> · runner {_e(config.runner)} · stages {_e(stages)} · "
        f"effective config {link(CONFIG_COPY)}</p>"
    )


def _counts(facts: dict[str, dict]) -> str:
    """The headline numbers, one box each, for the stages that have an output."""
    wanted = [(spec.name, key, label) for spec in STAGES for key, label in spec.headline]
    boxes = [
        f'<div class="count"><b>{_number(facts[stage][key])}</b><span>{_e(label)}</span></div>'
        for stage, key, label in wanted
        if key in facts.get(stage, {})
    ]
    return f'<h2>Counts</h2><div class="counts">{"".join(boxes)}</div>'


def _stage_table(job_dir: str, results: Sequence[StageResult]) -> str:
    """Each stage's status, time, counts and output folder."""
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
        folder = relative(job_dir, result.output)
        css = result.status.replace(" ", "-")
        rows.append(
            f"<tr><td>{_e(result.name)}</td><td class={css}>{_e(result.status)}</td>"
            f"<td class=num>{_e(shown)}</td>"
            f"<td>{counts if result.error else _e(counts)}</td>"
            f'<td><a href="{_e(folder)}/">{_e(folder)}/</a></td></tr>'
        )
    note = ""
    if any(result.status == "skipped" for result in results):
        note = (
            '<p class="meta">A skipped stage\'s inputs and parameters were unchanged and its '
            "output is the one its last run wrote; its time (in brackets) is that run's.</p>"
        )
    return (
        "<h2>Stages</h2><table><tr><th>stage</th><th>status</th><th>time</th>"
        f"<th>counts</th><th>output</th></tr>{''.join(rows)}</table>{note}"
    )


def _run_details(job_dir: str, plans: Sequence[StagePlan], results: Sequence[StageResult]) -> str:
    """Folded away: each stage's peak memory and every file of every output."""
    rows = []
    for result in results:
        memory = result.peak_rss_text()
        if result.status == "skipped" and result.peak_rss is not None:
            memory = f"({memory})"
        rows.append(f"<tr><td>{_e(result.name)}</td><td class=num>{_e(memory)}</td></tr>")
    note = (
        '<p class="meta">Peak RSS is the process\'s at the end of the stage; the stages share '
        "one process, so &le; marks a stage that did not raise it (its own peak is at most "
        "that). A skipped stage's (in brackets) is that of the run that wrote its output.</p>"
    )
    return (
        f'<details id="{_DETAILS_ID}"><summary>Run details</summary>'
        "<h3>Memory</h3><table><tr><th>stage</th><th>peak RSS</th></tr>"
        f"{''.join(rows)}</table>{note}{_files(job_dir, plans)}</details>"
    )


def _files(job_dir: str, plans: Sequence[StagePlan]) -> str:
    """Relative links to every file of every stage output (long shard lists are cut)."""
    sections = []
    for plan in plans:
        files = sorted(relative(job_dir, path) for path in list_files(plan.output))
        if not files:
            continue
        shown = files[:SHOWN_FILES]
        items = "".join(f'<li><a href="{_e(name)}">{_e(name)}</a></li>' for name in shown)
        if len(files) > len(shown):
            items += f"<li>and {len(files) - len(shown)} more files</li>"
        sections.append(f"<h4>{_e(plan.name)}</h4><ul class=files>{items}</ul>")
    extra = (
        f"<p>{link(CONFIG_COPY)} (the effective config) · {link(STATE_FILE)} (what each "
        "stage last ran with)</p>"
    )
    return "<h3>Files</h3>" + extra + "".join(sections)


def _titled(body: str) -> tuple[str, str]:
    """``body`` with an anchor on each section title, and the table of contents linking them
    (Run details last)."""
    taken: set[str] = set()
    entries = []

    def anchor(match: re.Match) -> str:
        title = match.group(1)
        slug = re.sub(r"[^a-z0-9]+", "-", re.sub(r"<[^>]+>", "", title).lower()).strip("-")
        slug = slug or "section"
        unique, n = slug, 1
        while unique in taken or unique == _DETAILS_ID:
            n += 1
            unique = f"{slug}-{n}"
        taken.add(unique)
        entries.append(f'<li><a href="#{unique}">{title}</a></li>')
        return f'<h2 id="{unique}">{title}</h2>'

    titled = _HEADING.sub(anchor, body)
    entries.append(f'<li><a href="#{_DETAILS_ID}">Run details</a></li>')
    contents = f'<nav class="contents"><h2>Contents</h2><ol>{"".join(entries)}</ol></nav>'
    return titled, contents


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
