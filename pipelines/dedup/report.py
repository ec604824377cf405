"""``report.html`` of the dedup stage, all of it: one self-contained page (inline SVG, no
network, no scripts; every id and text HTML-escaped): the counts, the similarity histogram, the
sweep, every method's sweep, the labelled-pairs calibration, the known duplicates found, what
changed since the last version and the largest groups side by side."""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sbert_pipeline.dedup.known import KnownView, known_fact
from sbert_pipeline.dedup.summary import NOT_COMPARED, DedupSummary, Histogram
from sbert_pipeline.dedup.versions import REPORT_FILE
from sbert_pipeline.grouping.compare import MethodSweep
from sbert_pipeline.grouping.model import CHAINED, CHAINED_MEANING, Grouping
from sbert_pipeline.grouping.sizes import distribution_text
from sbert_pipeline.grouping.sweep import SweepPoint
from sbert_pipeline.io.html import (
    SIMILARITY_AXIS,
    Bins,
    Series,
    histogram_svg,
    line_chart_svg,
    lines_svg,
    shown_text,
    write_text,
)
from sbert_pipeline.io.output_dir import join

_WIDTH, _HEIGHT = 680, 280


@dataclass(frozen=True)
class Member:
    """One member of a group as the report shows it."""

    id: str
    text: str | None  # None: unknown (the id is shown instead)
    kept: bool
    score: float | None  # similarity to the representative; None: itself, or chained


@dataclass(frozen=True)
class GroupView:
    """One group as the report shows it: the representative first, then (some) other members."""

    group: int
    size: int
    members: list[Member]


def report_page(
    facts: dict,
    histogram: Histogram,
    threshold: float,
    sweep: Sequence[SweepPoint],
    groups: Sequence[GroupView],
    *,
    total_groups: int,
    notes: Sequence[str] = (),
    sections: Sequence[str] = (),
) -> str:
    """The whole report page.

    Args:
        facts: ``{label: value}`` shown at the top.
        histogram: pair similarities.
        threshold: the threshold used (marked in both plots and the table).
        sweep: the threshold sweep, ascending.
        groups: the groups to show, largest first.
        total_groups: how many groups there are in all.
        notes: warnings shown under the facts (e.g. pairs limited to the top k).
        sections: more HTML sections after the sweep (every method, the labelled pairs).
    """
    fact_rows = "".join(
        f"<tr><th>{_text(label)}</th><td>{_text(value)}</td></tr>" for label, value in facts.items()
    )
    note_items = "".join(f"<li>{_text(note)}</li>" for note in notes)
    note_list = f'<ul class="notes">{note_items}</ul>' if notes else ""
    shown = (
        f"<p>The {len(groups)} largest of {total_groups} groups; all are in "
        "<code>groups.parquet</code>.</p>"
        if len(groups) < total_groups
        else ""
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Duplicate groups</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 80em; }}
table {{ border-collapse: collapse; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left;
          vertical-align: top; }}
td.num, th.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
tr.chosen {{ background: #fde0dd; font-weight: bold; }}
.groups td {{ width: 50%; }}
.groups ul {{ margin: 0; padding-left: 1.2em; }}
.score {{ color: #777; font-size: 85%; }}
.id {{ color: #777; font-size: 80%; font-family: monospace; }}
.notes {{ color: #8a3b00; }}
.legend {{ color: #555; font-size: 90%; }}
</style></head><body>
<h1>Duplicate groups</h1>
<table>{fact_rows}</table>
{note_list}
<h2>Pair similarities</h2>
{similarity_svg(histogram, threshold)}
<h2>Threshold sweep</h2>
{sweep_svg(sweep, threshold)}
{sweep_table(sweep, threshold)}
{"".join(sections)}
<h2>Largest groups</h2>
{shown}
{groups_html(groups)}
<p>Generated {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}.</p>
</body></html>
"""


def similarity_svg(histogram: Histogram, threshold: float) -> str:
    """Bars of pair counts per similarity bin, the threshold as a vertical line."""
    return histogram_svg(
        Bins(histogram.edges, histogram.counts),
        SIMILARITY_AXIS,
        "pairs",
        marker=threshold,
        width=_WIDTH,
        height=_HEIGHT,
    )


def sweep_svg(sweep: Sequence[SweepPoint], threshold: float) -> str:
    """Rows removed against the threshold, the chosen threshold marked."""
    return line_chart_svg(
        [point.threshold for point in sweep],
        [point.removed for point in sweep],
        "threshold",
        "rows removed",
        titles=[
            f"{point.threshold:g}: {point.removed} removed, {point.groups} groups"
            for point in sweep
        ],
        marker=threshold,
        width=_WIDTH,
        height=_HEIGHT,
    )


def sweep_table(sweep: Sequence[SweepPoint], threshold: float) -> str:
    """The sweep as a table, the chosen threshold's row highlighted."""
    rows = []
    for point in sweep:
        chosen = ' class="chosen"' if point.threshold == threshold else ""
        cells = (
            f"{point.threshold:g}",
            point.pairs,
            point.groups,
            point.removed,
            point.kept,
            point.largest,
        )
        rows.append(
            f"<tr{chosen}>" + "".join(f'<td class="num">{_text(c)}</td>' for c in cells) + "</tr>"
        )
    header = "".join(
        f'<th class="num">{name}</th>'
        for name in ("threshold", "pairs", "groups", "removed", "kept", "largest group")
    )
    return f"<table><tr>{header}</tr>{''.join(rows)}</table>"


def groups_html(groups: Sequence[GroupView]) -> str:
    """Each group as one row: the kept member on the left, the removed ones on the right."""
    if not groups:
        return "<p>No duplicate groups at this threshold.</p>"
    rows = []
    for view in groups:
        kept = [member for member in view.members if member.kept]
        removed = [member for member in view.members if not member.kept]
        hidden = view.size - len(view.members)
        more = f"<li>\u2026 and {hidden} more</li>" if hidden > 0 else ""
        removed_items = "".join(f"<li>{_member(member)}</li>" for member in removed)
        rows.append(
            f"<tr><td><b>group {view.group}</b> <span class=score>({view.size} rows)</span><br>"
            f"{''.join(_member(member) for member in kept)}</td>"
            f"<td><ul>{removed_items}{more}</ul></td></tr>"
        )
    return (
        f'<p class="legend">Each removed row shows its cosine similarity to the kept row; '
        f"<b>{CHAINED}</b>: {html.escape(CHAINED_MEANING)}.</p>"
        '<table class="groups"><tr><th>kept</th><th>removed (similarity to the kept row)</th>'
        f"</tr>{''.join(rows)}</table>"
    )


def _member(member: Member) -> str:
    if member.kept:
        score = ""
    elif member.score is None:
        score = f'<span class=score title="{html.escape(CHAINED_MEANING)}">{CHAINED}</span> '
    else:
        score = f"<span class=score>{member.score:.3f}</span> "
    ident = f"<span class=id>{html.escape(member.id)}</span>"
    if member.text is None:
        return f"{score}{ident}"
    return f"{score}{shown_text(member.text)} {ident}"


def _text(value) -> str:
    return html.escape(str(value))


# The precision-recall chart is square-ish.
_PR_WIDTH, _PR_HEIGHT = 420, 360
# One colour per method, in METHODS order (the chosen one is drawn thicker).
_COLOURS = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#9d755d", "#e45756")


def methods_section(sweeps: Sequence[MethodSweep], threshold: float) -> str:
    """Every method at every threshold: removed rows and largest group (P/R/F1 if labelled)."""
    labelled = bool(sweeps[0].labels)
    sub = ("removed", "largest", "P", "R", "F1") if labelled else ("removed", "largest")
    head = "".join(f'<th colspan="{len(sub)}">{html.escape(s.method)}</th>' for s in sweeps)
    sub_head = "".join(f'<th class="num">{name}</th>' for _ in sweeps for name in sub)
    rows = []
    for i, point in enumerate(sweeps[0].points):
        cells = []
        for sweep in sweeps:
            other = sweep.points[i]
            cells += [other.removed, other.largest]
            if sweep.labels:
                label = sweep.labels[i]
                cells += [f"{label.precision:.3f}", f"{label.recall:.3f}", f"{label.f1:.3f}"]
        chosen = ' class="chosen"' if point.threshold == threshold else ""
        rows.append(
            f'<tr{chosen}><td class="num">{point.threshold:g}</td>'
            + "".join(f'<td class="num">{cell}</td>' for cell in cells)
            + "</tr>"
        )
    compared = (
        "The chosen method first."
        if len(sweeps) > 1
        else f"Not compared: {html.escape(NOT_COMPARED)}."
    )
    return (
        f"<h2>Every method</h2><p>{compared} Largest group: the most rows one "
        "group holds (a method that chains makes it grow with the corpus).</p>"
        f'<table><tr><th rowspan="2">threshold</th>{head}</tr><tr>{sub_head}</tr>'
        f"{''.join(rows)}</table>"
    )


def labels_section(
    sweeps: Sequence[MethodSweep], labels: dict, target: float | None, threshold: float
) -> str:
    """The calibration per method and the precision-recall curves (labelled runs only).

    Args:
        sweeps: every method's sweep, with labels.
        labels: the labelled pairs' counts (read, evaluated, duplicates, ...).
        target: the target precision, if one was asked for.
        threshold: the threshold in use (marked on the chosen method's curve).
    """
    facts = ", ".join(f"{html.escape(str(k))} {html.escape(str(v))}" for k, v in labels.items())
    header = ["method", "best F1", "at", "P", "R", "largest"]
    if target is not None:
        header += [f"precision &ge; {target:g} at", "R there"]
    rows = []
    for sweep in sweeps:
        best = sweep.best()
        cells = [
            html.escape(sweep.method),
            f"{best.f1:.3f}",
            f"{best.threshold:g}",
            f"{best.precision:.3f}",
            f"{best.recall:.3f}",
            best.largest,
        ]
        if target is not None:
            reached = sweep.at_precision(target)
            cells += (
                [f"{reached.threshold:g}", f"{reached.recall:.3f}"] if reached else ["none", ""]
            )
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    head = "".join(f"<th>{name}</th>" for name in header)
    return (
        "<h2>Against the labelled pairs</h2>"
        f"<p>Pair precision, recall and F1 of &ldquo;both in one group&rdquo; on the labelled "
        f"pairs only ({facts}).</p>"
        f"{'' if len(sweeps) > 1 else f'<p>{html.escape(NOT_COMPARED)}.</p>'}"
        f"<table><tr>{head}</tr>{''.join(rows)}</table>"
        "<h3>Precision-recall curve</h3>"
        f"{pr_curve_svg(sweeps, threshold)}"
    )


def pr_curve_svg(sweeps: Sequence[MethodSweep], threshold: float) -> str:
    """Precision (y) against recall (x), one line per method through its sweep points; the
    chosen method (first) drawn thicker, its point at ``threshold`` marked."""
    lines = []
    for number, sweep in enumerate(sweeps):
        labels = sweep.labels or ()
        chosen = [i for i, label in enumerate(labels) if label.threshold == threshold]
        lines.append(
            Series(
                sweep.method,
                [label.recall for label in labels],
                [label.precision for label in labels],
                titles=[
                    f"{sweep.method} at {label.threshold:g}: P {label.precision:.3f}, "
                    f"R {label.recall:.3f}, F1 {label.f1:.3f}"
                    for label in labels
                ],
                colour=_COLOURS[number % len(_COLOURS)],
                stroke_width=3 if number == 0 else 1.5,
                highlight=chosen[0] if number == 0 and chosen else None,
            )
        )
    return lines_svg(
        lines,
        "recall",
        "precision",
        x_range=(0.0, 1.0),
        y_range=(0.0, 1.0),
        legend=True,
        aria_label="precision-recall curve",
        width=_PR_WIDTH,
        height=_PR_HEIGHT,
    )


def known_section(view: KnownView, sweeps: Sequence[MethodSweep], threshold: float) -> str:
    """Known-duplicate recall: at the threshold, per method and threshold, and missed pairs."""
    known = view.known
    left_out = []
    if known.pairs.unknown:
        left_out.append(f"{known.pairs.unknown} name an id that was not embedded")
    if known.pairs.same_item:
        left_out.append(f"{known.pairs.same_item} name their own row")
    if known.repeated:
        left_out.append(f"{known.repeated} repeat a pair")
    aside = f" ({'; '.join(left_out)}: not counted)" if left_out else ""
    precision = (
        f" Precision on the labelled pairs: {view.precision:.3f}."
        if view.precision is not None
        else " Known duplicates measure recall only: that a group holds no distinct texts "
        "needs labelled non-duplicates (<code>--labels</code>)."
    )
    head = (
        "<h2>Known duplicates</h2>"
        f"<p>{known.count} known duplicate pairs from {html.escape(known.describe())}"
        f"{aside}. A pair is found when both rows end in one group. At threshold "
        f"{threshold:g}, {html.escape(view.method)} found <b>{view.found.found} of "
        f"{view.found.known}</b> (recall {view.found.recall:.3f}).{precision}</p>"
    )
    return head + _known_table(sweeps, threshold) + _missed_list(view)


def _known_table(sweeps: Sequence[MethodSweep], threshold: float) -> str:
    """Known-duplicate recall (pairs found) of every method at every sweep threshold."""
    with_known = [sweep for sweep in sweeps if sweep.known]
    if not with_known:
        return ""
    head = "".join(f'<th class="num">{html.escape(sweep.method)}</th>' for sweep in with_known)
    rows = []
    for i, point in enumerate(with_known[0].known):
        cells = "".join(
            f'<td class="num">{sweep.known[i].recall:.3f} ({sweep.known[i].counts.tp})</td>'
            for sweep in with_known
        )
        chosen = ' class="chosen"' if point.threshold == threshold else ""
        rows.append(f'<tr{chosen}><td class="num">{point.threshold:g}</td>{cells}</tr>')
    return (
        "<p>Known-duplicate recall (pairs found) of every method, the chosen one first:</p>"
        f'<table><tr><th class="num">threshold</th>{head}</tr>{"".join(rows)}</table>'
    )


def _missed_list(view: KnownView) -> str:
    if not view.missed:
        return ""
    items = []
    for pair in view.missed:
        score = (
            f"{pair.score:.3f}"
            if pair.score is not None
            else f"&lt; {view.low:g} (not among the pairs)"
        )
        items.append(
            f"<li><span class=score>{score}</span> {_item(pair.id_a, pair.text_a)} "
            f"&harr; {_item(pair.id_b, pair.text_b)}</li>"
        )
    more = view.found.missed - len(view.missed)
    tail = f"<li>\u2026 and {more} more</li>" if more > 0 else ""
    return (
        f"<h3>Missed at the threshold</h3><p>Known pairs in two groups (or alone), with their "
        f"cosine similarity:</p><ul>{''.join(items)}{tail}</ul>"
    )


def _item(item: str, text: str | None) -> str:
    ident = f"<span class=id>{html.escape(item)}</span>"
    return ident if text is None else f"{shown_text(text)} {ident}"


def changes_html(changes: dict | None, stable: dict | None) -> str:
    """The report's "Since the last run" section ("" without a previous version)."""
    if changes is None:
        return ""
    groups, rows = changes["groups"], changes["rows"]
    if stable and stable["pinned"]:
        changed = ", ".join(stable["settings_changed"])
        though = f" (--stable-keep, though {changed})" if changed else ""
        pinned = (
            f"The {stable['rows_pinned']} rows it kept that still exist were kept again{though}."
        )
    else:
        pinned = f"Its kept rows were not pinned: {stable['reason'] if stable else 'unknown'}."
    cells = [
        ("new groups (no member was in a group)", groups["new"]),
        ("grown groups (a previous group and more)", groups["grown"]),
        ("other changed groups", groups["changed"]),
        ("unchanged groups (same members, same id)", groups["unchanged"]),
        ("rows newly removed", rows["newly_removed"]),
        ("previously kept rows now removed", rows["previously_kept_removed"]),
        ("rows newly kept", rows["newly_kept"]),
        ("new rows", rows["new"]),
        ("rows gone", rows["gone"]),
    ]
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in cells)
    return (
        "<h2>Since the last run</h2>"
        f"<p>Compared with the version of {html.escape(str(changes['previous_created']))}. "
        f"{html.escape(pinned)}</p><table>{table}</table>"
    )


def write_report_html(
    output: str,
    summary: DedupSummary,
    groups: Grouping,
    facts: dict,
    histogram: Histogram,
    views: list[GroupView],
    labels: dict | None = None,
    known: KnownView | None = None,
    first_sections: Sequence[str] = (),
) -> None:
    """``report.html``: the counts, the plots, every method's sweep, the calibration against
    the labelled pairs (``labels``: their counts), the known duplicates found (``known``) and
    the largest groups with their texts; ``first_sections`` (HTML) come before the others."""
    counts = {
        "threshold": f"{summary.threshold:g}",
        "method": summary.method,
        "keep": summary.keep,
        **({"radius": f"{summary.radius:g}"} if summary.radius is not None else {}),
        "rows in": summary.rows_in,
        "kept": summary.kept,
        "removed": f"{summary.removed:,} ({summary.removed_share:.1%} of the rows)",
        "groups": summary.groups,
        "largest group": summary.largest,
        "groups by size": distribution_text(summary.group_sizes) or "none",
        "pairs used (score >= threshold)": groups.pairs_used,
    }
    point = summary.at_threshold()
    if point is not None:
        counts["labelled pairs: P / R / F1 at the threshold"] = (
            f"{point.precision:.3f} / {point.recall:.3f} / {point.f1:.3f}"
        )
    if known is not None:
        counts["known duplicate pairs in one group"] = known_fact(known)
    if summary.corpus is not None:
        counts["corpus rows written / read"] = (
            f"{summary.corpus['written']} / {summary.corpus['rows_read']}"
        )
        counts["corpus rows not embedded"] = summary.corpus["not_embedded"]
    sections = [section for section in first_sections if section]
    if known is not None:
        sections.append(known_section(known, summary.sweeps, summary.threshold))
    if summary.sweeps:
        sections.append(methods_section(summary.sweeps, summary.threshold))
        if labels is not None:
            sections.append(
                labels_section(summary.sweeps, labels, summary.target_precision, summary.threshold)
            )
    page = report_page(
        {**facts, **counts},
        histogram,
        summary.threshold,
        summary.sweep,
        views,
        total_groups=groups.n_groups,
        notes=summary.notes,
        sections=sections,
    )
    write_text(join(output, REPORT_FILE), page)
