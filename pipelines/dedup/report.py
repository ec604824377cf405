"""``report.html`` of the dedup stage: one self-contained page (no network, no scripts).

It shows the key counts, a histogram of the pair similarities with the threshold marked, the
threshold sweep (how many rows each threshold would remove) as a plot and a table, and the
largest groups side by side: the kept representative next to the removed members with their
similarity to it. Plots are inline SVG; every id and text is HTML-escaped.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.dedup.groups import Histogram, SweepPoint
from sbert_pipeline.dedup.terms import CHAINED, CHAINED_MEANING
from sbert_pipeline.io.html import SIMILARITY_AXIS, Bins, histogram_svg, line_chart_svg, shown_text

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


def report_html(
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
{groups_table(groups)}
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


def groups_table(groups: Sequence[GroupView]) -> str:
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
