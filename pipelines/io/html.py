"""Pieces of the self-contained HTML reports (cluster, dedup, sbert run): text, inline SVG plots.

Every report plot is drawn here: :func:`bar_chart_svg` (binned counts: cluster sizes, pair
similarities), :func:`line_chart_svg` (a curve of counts: the dedup threshold sweep) and
:func:`lines_svg` (several curves: the precision-recall curve of every dedup method), on one
frame with "nice" axis ticks (steps of 1, 2 or 5 times a power of ten) and an optional dashed
marker line (the threshold in use). Labels are HTML-escaped; the SVG needs no scripts or network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np
from apache_beam.io.filesystems import FileSystems

# Texts longer than this are cut in the report (summary.parquet keeps them whole).
REPORT_TEXT_CHARS = 300

BAR_COLOUR = "#4c78a8"
MARK_COLOUR = "#d62728"  # the marker: the threshold in use
_MAX_BINS = 30


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About ``count`` round values covering ``[low, high]`` (steps of 1, 2 or 5 x 10^k).

    Returns only values inside the range; a range of zero width gives ``[low]``.
    """
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12) + 0.0)  # + 0.0 turns -0.0 into 0.0
        value += step
    return ticks


def _tick_text(value: float, ticks: Sequence[float]) -> str:
    """A tick's label with as many decimals as the step between ticks needs."""
    step = (ticks[1] - ticks[0]) if len(ticks) > 1 else abs(value) or 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{value:.{decimals}f}"


@dataclass(frozen=True)
class _Frame:
    """The plot area of one chart and its value-to-pixel mapping.

    ``y_high`` is the top of the y axis; with ``counts`` the y axis is ``0 .. y_high`` and only
    whole numbers are labelled.
    """

    x_low: float
    x_high: float
    y_high: float
    width: int
    height: int
    y_low: float = 0.0
    counts: bool = True
    left: int = 60
    right: int = 16
    top: int = 16
    bottom: int = 44

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    def x(self, value: float) -> float:
        if self.x_high <= self.x_low:
            return self.left + self.plot_w / 2
        return self.left + self.plot_w * (value - self.x_low) / (self.x_high - self.x_low)

    def y(self, value: float) -> float:
        span = (self.y_high - self.y_low) or 1.0
        return self.top + self.plot_h - self.plot_h * (value - self.y_low) / span

    def open(self, label: str) -> list[str]:
        base = self.top + self.plot_h
        return [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
            f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" role="img" '
            f'aria-label="{escape(label)}">',
            f'<line x1="{self.left}" y1="{base}" x2="{self.left + self.plot_w}" y2="{base}" '
            'stroke="#333"/>',
            f'<line x1="{self.left}" y1="{self.top}" x2="{self.left}" y2="{base}" stroke="#333"/>',
        ]

    def close(self, x_label: str, y_label: str, *, integer_x: bool = False) -> list[str]:
        base, middle = self.top + self.plot_h, self.top + self.plot_h / 2
        parts = []
        x_ticks = nice_ticks(self.x_low, self.x_high)
        if integer_x:
            x_ticks = [tick for tick in x_ticks if tick == int(tick)] or [self.x_low]
        for value in x_ticks:
            x = self.x(value)
            parts.append(
                f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" stroke="#333"/>'
                f'<text x="{x:.1f}" y="{base + 16}" font-size="11" text-anchor="middle">'
                f"{_tick_text(value, x_ticks)}</text>"
            )
        y_ticks = nice_ticks(self.y_low, self.y_high)
        if self.counts:
            y_ticks = [tick for tick in y_ticks if tick == int(tick)]
        for value in y_ticks:
            y = self.y(value)
            parts.append(
                f'<line x1="{self.left - 4}" y1="{y:.1f}" x2="{self.left}" y2="{y:.1f}" '
                f'stroke="#333"/><text x="{self.left - 6}" y="{y + 4:.1f}" font-size="11" '
                f'text-anchor="end">{_tick_text(value, y_ticks)}</text>'
            )
        parts += [
            f'<text x="{self.left + self.plot_w / 2}" y="{self.height - 8}" font-size="12" '
            f'text-anchor="middle">{escape(x_label)}</text>',
            f'<text x="14" y="{middle}" font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 14 {middle})">{escape(y_label)}</text>',
            "</svg>",
        ]
        return parts

    def marker(self, value: float | None, label: str | None) -> list[str]:
        """A dashed vertical line at ``value`` (nothing when it is outside the range)."""
        if value is None or not self.x_low <= value <= self.x_high:
            return []
        x, text = self.x(value), escape(label if label is not None else f"threshold {value:g}")
        # The label sits on the side with more room, so it stays inside the plot.
        right_half = x > self.left + self.plot_w / 2
        text_x, anchor = (x - 4, "end") if right_half else (x + 4, "start")
        return [
            f'<line x1="{x:.1f}" y1="{self.top}" x2="{x:.1f}" y2="{self.top + self.plot_h}" '
            f'stroke="{MARK_COLOUR}" stroke-width="2" stroke-dasharray="5,3">'
            f"<title>{text}</title></line>"
            f'<text x="{text_x:.1f}" y="{self.top + 12}" font-size="11" fill="{MARK_COLOUR}" '
            f'text-anchor="{anchor}">{text}</text>'
        ]


def bar_chart_svg(
    counts: Sequence[int] | np.ndarray,
    edges: Sequence[float] | np.ndarray,
    x_label: str,
    y_label: str,
    *,
    marker: float | None = None,
    marker_label: str | None = None,
    edge_format: str = "{:.3f}",
    integer_x: bool = False,
    width: int = 640,
    height: int = 260,
) -> str:
    """An SVG bar chart of binned counts: bin ``i`` spans ``edges[i]`` to ``edges[i + 1]``.

    Args:
        counts: ``(n,)`` count per bin.
        edges: ``(n + 1,)`` ascending bin edges.
        x_label, y_label: axis titles (what is binned; what is counted).
        marker: a value on the x axis drawn as a dashed line (e.g. the threshold in use).
        marker_label: its label; default ``"threshold {marker:g}"``.
        edge_format: how a bar's tooltip writes its edges.
        integer_x: label only whole numbers on the x axis (sizes, counts).
        width, height: the picture's size in pixels.

    Example:
        >>> svg = bar_chart_svg([3, 1], [0.5, 0.75, 1.0], "cosine", "pairs", marker=0.8)
    """
    counts = np.asarray(counts, dtype=np.int64)
    edges = np.asarray(edges, dtype=np.float64)
    if len(edges) != len(counts) + 1:
        raise ValueError(f"{len(counts)} bins need {len(counts) + 1} edges, got {len(edges)}")
    frame = _Frame(
        float(edges[0]), float(edges[-1]), max(int(counts.max(initial=0)), 1), width, height
    )
    parts = frame.open(f"{y_label} by {x_label}")
    for i, count in enumerate(counts.tolist()):
        x0, x1 = frame.x(float(edges[i])), frame.x(float(edges[i + 1]))
        if edges[-1] <= edges[0]:  # one value only: one bar across the plot
            x0, x1 = frame.left, frame.left + frame.plot_w
        y = frame.y(count)
        span = f"{edge_format.format(edges[i])} to {edge_format.format(edges[i + 1])}"
        parts.append(
            f'<rect x="{x0 + 0.5:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 1, 0.5):.1f}" '
            f'height="{frame.top + frame.plot_h - y:.1f}" fill="{BAR_COLOUR}">'
            f"<title>{span}: {count} {escape(y_label)}</title></rect>"
        )
    parts += frame.marker(marker, marker_label)
    parts += frame.close(x_label, y_label, integer_x=integer_x)
    return "\n".join(parts)


@dataclass(frozen=True)
class Series:
    """One line of a :func:`lines_svg` chart: points ``(xs[i], ys[i])``, each a dot.

    Attributes:
        name: shown in the legend and the line's tooltip.
        titles: a tooltip per point (default ``"x: y"``).
        highlight: the index of a point drawn larger in the marker colour (the one in use).
    """

    name: str
    xs: Sequence[float]
    ys: Sequence[float]
    titles: Sequence[str] | None = None
    colour: str = BAR_COLOUR
    stroke_width: float = 2.0
    highlight: int | None = None

    def __post_init__(self) -> None:
        if len(self.xs) != len(self.ys):
            raise ValueError(f"{self.name}: {len(self.xs)} x values but {len(self.ys)} y values")


def lines_svg(
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    *,
    x_range: tuple[float, float] | None = None,
    y_range: tuple[float, float] | None = None,
    marker: float | None = None,
    marker_label: str | None = None,
    legend: bool = False,
    aria_label: str | None = None,
    width: int = 640,
    height: int = 260,
) -> str:
    """An SVG chart of one or more lines through dotted points.

    Args:
        series: the lines, drawn in order.
        x_label, y_label: axis titles.
        x_range: the x axis (default: the points' smallest to largest x).
        y_range: the y axis; default ``0 .. the largest y`` with whole-number ticks (counts).
        marker: a value on the x axis drawn as a dashed line (e.g. the threshold in use).
        marker_label: its label; default ``"threshold {marker:g}"``.
        legend: write each series' name in its colour at the top right.
        aria_label: the picture's accessible name (default ``"y_label by x_label"``).
        width, height: the picture's size in pixels.
    """
    xs = [float(x) for line in series for x in line.xs]
    ys = [float(y) for line in series for y in line.ys]
    x_low, x_high = x_range or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    if y_range is None:
        frame = _Frame(x_low, x_high, max(max(ys, default=0.0), 1.0), width, height)
    else:
        frame = _Frame(x_low, x_high, y_range[1], width, height, y_low=y_range[0], counts=False)
    parts = frame.open(aria_label or f"{y_label} by {x_label}")
    for number, line in enumerate(series):
        pairs = zip(line.xs, line.ys, strict=True)
        points = [(frame.x(float(x)), frame.y(float(y))) for x, y in pairs]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{line.colour}" '
            f'stroke-width="{line.stroke_width:g}"><title>{escape(line.name)}</title></polyline>'
        )
        for i, (x, y) in enumerate(points):
            chosen = i == line.highlight
            title = line.titles[i] if line.titles is not None else f"{line.xs[i]:g}: {line.ys[i]}"
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{4 if chosen else 3}" '
                f'fill="{MARK_COLOUR if chosen else line.colour}"><title>{escape(title)}</title>'
                "</circle>"
            )
        if legend:
            parts.append(
                f'<text x="{frame.left + frame.plot_w - 4}" y="{frame.top + 12 + 13 * number}" '
                f'font-size="11" text-anchor="end" fill="{line.colour}">{escape(line.name)}</text>'
            )
    parts += frame.marker(marker, marker_label)
    parts += frame.close(x_label, y_label)
    return "\n".join(parts)


def line_chart_svg(
    xs: Sequence[float],
    ys: Sequence[int],
    x_label: str,
    y_label: str,
    *,
    titles: Sequence[str] | None = None,
    marker: float | None = None,
    marker_label: str | None = None,
    width: int = 640,
    height: int = 260,
) -> str:
    """One line of counts through points ``(xs[i], ys[i])``; the point at ``marker`` is
    highlighted and the marker drawn as a dashed line (see :func:`lines_svg`)."""
    highlight = next((i for i, x in enumerate(xs) if marker is not None and x == marker), None)
    line = Series(y_label, xs, ys, titles=titles, highlight=highlight)
    return lines_svg(
        [line],
        x_label,
        y_label,
        marker=marker,
        marker_label=marker_label,
        width=width,
        height=height,
    )


def size_histogram_svg(sizes: np.ndarray, *, width: int = 640, height: int = 260) -> str:
    """An SVG bar chart: how many clusters have each size (binned, at most 30 bins)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) == 0:
        sizes = np.zeros(1, np.int64)
    n_bins = int(min(_MAX_BINS, len(np.unique(sizes))))
    counts, edges = np.histogram(sizes, bins=n_bins)
    return bar_chart_svg(
        counts,
        edges,
        "cluster size (members)",
        "clusters",
        edge_format="{:.0f}",
        integer_x=True,
        width=width,
        height=height,
    )


def shown_text(text: str) -> str:
    """``text`` HTML-escaped and cut to :data:`REPORT_TEXT_CHARS` characters (with an ellipsis);
    the full text stays in the stage's Parquet output."""
    if len(text) > REPORT_TEXT_CHARS:
        text = text[: REPORT_TEXT_CHARS - 1] + "\u2026"
    return escape(text)


def write_text(path: str, text: str, mime_type: str = "text/html") -> None:
    """Write a text file on any Beam filesystem."""
    with FileSystems.create(path, mime_type=mime_type) as handle:
        handle.write(text.encode("utf-8"))
