"""The every-method parts of the dedup ``report.html``: the sweep of every method; with
labelled pairs, P/R/F1 per threshold, the calibrated thresholds and a precision-recall curve;
with known duplicates (a ``duplicate_of`` field, or the labelled duplicates), how many of them
each method found (inline SVG, no scripts; every label HTML-escaped)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.dedup.groups import IndexedPairs
from sbert_pipeline.dedup.known import Found, KnownDuplicates, known_found, missed_pairs
from sbert_pipeline.dedup.sweep import NOT_COMPARED, MethodSweep
from sbert_pipeline.io.html import Series, lines_svg, shown_text

_WIDTH, _HEIGHT = 420, 360
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
        width=_WIDTH,
        height=_HEIGHT,
    )


@dataclass(frozen=True)
class MissedPair:
    """A known duplicate pair that the groups split, as the report shows it."""

    id_a: str
    text_a: str | None
    id_b: str
    text_b: str | None
    score: float | None  # the pair's cosine when it was loaded, else None (under the pairs')


@dataclass(frozen=True)
class KnownView:
    """The known duplicates at the threshold, for the report.

    Attributes:
        known: the known pairs and where they come from.
        found: the chosen method's groups at the threshold on them.
        method: the chosen method.
        precision: the chosen method's pair precision on the labelled pairs (None without
            labels: known duplicates alone cannot measure it).
        missed: some of the pairs the groups split.
        low: the lowest pair score loaded (a missed pair not loaded scores below it).
    """

    known: KnownDuplicates
    found: Found
    method: str
    precision: float | None
    missed: Sequence[MissedPair]
    low: float


def known_view(
    known: KnownDuplicates,
    group: np.ndarray,
    method: str,
    precision: float | None,
    pairs: IndexedPairs,
    ids: Sequence[str],
    texts: dict[str, str],
    low: float,
) -> KnownView:
    """The known duplicates as the report shows them.

    Args:
        known: the known pairs.
        group: ``(n,)`` the written groups (-1: in no group).
        method: the chosen method.
        precision: its pair precision on the labelled pairs at the threshold (None: no labels).
        pairs: the pairs loaded (the missed pairs' scores come from them).
        ids: item ids by row.
        texts: ``{id: text}`` where known.
        low: every pair scoring at least this was loaded.
    """
    missed = missed_pairs(group, known)
    n = len(ids)
    wanted = np.array([a * n + b for a, b in missed], np.int64)
    keys = np.minimum(pairs.a, pairs.b) * n + np.maximum(pairs.a, pairs.b)
    hit = np.flatnonzero(np.isin(keys, wanted))
    scores = {int(keys[i]): float(pairs.scores[i]) for i in hit}
    shown = [
        MissedPair(ids[a], texts.get(ids[a]), ids[b], texts.get(ids[b]), scores.get(a * n + b))
        for a, b in missed
    ]
    return KnownView(known, known_found(group, known), method, precision, shown, low)


def known_fact(view: KnownView) -> str:
    """The one-line fact for the top of the report: ``"150 of 150 pairs (recall 1.000)"``."""
    text = f"{view.found.found} of {view.found.known} pairs (recall {view.found.recall:.3f})"
    if view.precision is not None:
        text += f"; precision on the labelled pairs {view.precision:.3f}"
    return text


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
