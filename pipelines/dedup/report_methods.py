"""The every-method parts of the dedup ``report.html``: the sweep of every method and, with
labelled pairs, P/R/F1 per threshold, the calibrated thresholds and a precision-recall curve
(inline SVG, no scripts; every label HTML-escaped)."""

from __future__ import annotations

import html
from collections.abc import Sequence

from pipelines.dedup.sweep import MethodSweep
from pipelines.io.html import Series, lines_svg

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
    return (
        "<h2>Every method</h2><p>The chosen method first. Largest group: the most rows one "
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
