"""Pieces of the self-contained HTML reports (cluster, dedup, sbert run): text, inline SVG plots.

Every report plot is drawn here. :func:`histogram_svg` is the one histogram of every report
(cluster sizes, pair similarities): it draws :class:`Bins`, whose edges are round numbers when
made by :meth:`Bins.round` / :meth:`Bins.of`. :func:`line_chart_svg` draws a curve of counts
(the dedup threshold sweep) and :func:`lines_svg` several curves (the precision-recall curve of
every dedup method). All share one frame: both axes titled; ticks at round values (steps of 1,
2 or 5 times a power of ten, :mod:`sbert_pipeline.io.ticks`) that cover the data, so the axis runs
from a tick at or below the smallest value to one at or above the largest; as many ticks as
keep their labels apart; a left margin as wide as the widest count; an optional dashed marker
line (the threshold in use). Labels are HTML-escaped; the SVG needs no scripts or network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np
from apache_beam.io.filesystems import FileSystems
from sbert_pipeline.io.ticks import FONT_PX as _FONT_PX
from sbert_pipeline.io.ticks import fitted_ticks, round_step, text_px, tick_text

# Texts longer than this are cut in the report (summary.parquet keeps them whole).
REPORT_TEXT_CHARS = 300

BAR_COLOUR = "#4c78a8"
MARK_COLOUR = "#d62728"  # the marker: the threshold in use
# The x axes of the histograms every report shares.
SIMILARITY_AXIS = "cosine similarity of the pair"
SIZE_AXIS = "cluster size (members)"
# Bins of a histogram made from values (cluster sizes, pair similarities).
MAX_BINS = 40


@dataclass(frozen=True)
class _Frame:
    """The plot area of one chart, its ticks and its value-to-pixel mapping.

    Made by :func:`_frame`: the axes run from the first tick to the last, so the ticks cover
    the data, and ``left`` leaves room for the widest y label.
    """

    x_ticks: list[float]
    y_ticks: list[float]
    width: int
    height: int
    left: int
    right: int = 16
    top: int = 20
    bottom: int = 44

    @property
    def x_low(self) -> float:
        return self.x_ticks[0]

    @property
    def x_high(self) -> float:
        return self.x_ticks[-1]

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    def x(self, value: float) -> float:
        return self.left + self.plot_w * (value - self.x_low) / (self.x_high - self.x_low)

    def y(self, value: float) -> float:
        low, high = self.y_ticks[0], self.y_ticks[-1]
        return self.top + self.plot_h - self.plot_h * (value - low) / (high - low)

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

    def close(self, x_label: str, y_label: str) -> list[str]:
        base, middle = self.top + self.plot_h, self.top + self.plot_h / 2
        parts = []
        for value in self.x_ticks:
            x = self.x(value)
            parts.append(
                f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" stroke="#333"/>'
                f'<text class="x-tick" x="{x:.1f}" y="{base + 16}" font-size="{_FONT_PX}" '
                f'text-anchor="middle">{tick_text(value, self.x_ticks)}</text>'
            )
        for value in self.y_ticks:
            y = self.y(value)
            parts.append(
                f'<line x1="{self.left - 4}" y1="{y:.1f}" x2="{self.left}" y2="{y:.1f}" '
                f'stroke="#333"/><text class="y-tick" x="{self.left - 6}" y="{y + 4:.1f}" '
                f'font-size="{_FONT_PX}" text-anchor="end">{tick_text(value, self.y_ticks)}</text>'
            )
        parts += [
            f'<text class="x-title" x="{self.left + self.plot_w / 2}" y="{self.height - 8}" '
            f'font-size="12" text-anchor="middle">{escape(x_label)}</text>',
            f'<text class="y-title" x="14" y="{middle}" font-size="12" text-anchor="middle" '
            f'transform="rotate(-90 14 {middle})">{escape(y_label)}</text>',
            "</svg>",
        ]
        return parts

    def marker(self, value: float | None, label: str | None) -> list[str]:
        """A dashed vertical line at ``value`` (nothing when it is outside the range)."""
        if value is None or not self.x_low <= value <= self.x_high:
            return []
        x, text = self.x(value), escape(label if label is not None else f"threshold {value:g}")
        # The label sits above the plot on the side with more room, so it stays in the picture
        # and clear of the bars.
        right_half = x > self.left + self.plot_w / 2
        text_x, anchor = (x - 4, "end") if right_half else (x + 4, "start")
        return [
            f'<line x1="{x:.1f}" y1="{self.top}" x2="{x:.1f}" y2="{self.top + self.plot_h}" '
            f'stroke="{MARK_COLOUR}" stroke-width="2" stroke-dasharray="5,3">'
            f"<title>{text}</title></line>"
            f'<text class="marker" x="{text_x:.1f}" y="{self.top - 6}" font-size="{_FONT_PX}" '
            f'fill="{MARK_COLOUR}" text-anchor="{anchor}">{text}</text>'
        ]


def _frame(
    x_range: tuple[float, float],
    y_range: tuple[float, float],
    width: int,
    height: int,
    *,
    integer_x: bool = False,
    integer_y: bool = True,
) -> _Frame:
    """A frame whose round ticks cover both ranges, with labels that keep apart."""
    top, bottom = _Frame.top, _Frame.bottom
    plot_h = height - top - bottom
    y_ticks = fitted_ticks(*y_range, plot_h, lambda _: _FONT_PX, integer=integer_y)
    widest = max(text_px(tick_text(value, y_ticks)) for value in y_ticks)
    # The rotated y title takes x 8 .. 20; the tick labels end 6 px left of the axis.
    left = max(48, math.ceil(26 + widest + 6))
    plot_w = width - left - _Frame.right
    x_ticks = fitted_ticks(*x_range, plot_w, text_px, integer=integer_x)
    return _Frame(x_ticks, y_ticks, width, height, left)


@dataclass(frozen=True, eq=False)
class Bins:
    """Counts of values in bins: bin ``i`` spans ``edges[i]`` to ``edges[i + 1]`` (the last one
    includes its right edge).

    ``integer``: the values are whole numbers (sizes); bins of width 1 are centred on each
    number, wider ones hold ``edge .. next edge - 1``.

    Example:
        >>> bins = Bins.round(0.8, 1.0)  # round edges 0.800, 0.805, ..., 1.000
        >>> for scores in batches:
        ...     bins.add(scores)  # streamed: bounded memory
        >>> svg = histogram_svg(bins, "cosine similarity of the pair", "pairs")
    """

    edges: np.ndarray  # (b + 1,) float64, ascending
    counts: np.ndarray | None = None  # (b,) int64; default zeros
    integer: bool = False

    def __post_init__(self) -> None:
        edges = np.asarray(self.edges, dtype=np.float64)
        counts = (
            np.zeros(max(len(edges) - 1, 0), np.int64)
            if self.counts is None
            else np.asarray(self.counts, dtype=np.int64)
        )
        if len(edges) != len(counts) + 1 or len(counts) == 0:
            raise ValueError(f"{len(counts)} bins need {len(counts) + 1} edges, got {len(edges)}")
        if np.any(np.diff(edges) <= 0):
            raise ValueError("bin edges must be strictly ascending")
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "counts", counts)

    @classmethod
    def round(
        cls, low: float, high: float, *, max_bins: int = MAX_BINS, integer: bool = False
    ) -> Bins:
        """Empty bins covering ``[low, high]`` whose width is 1, 2 or 5 x 10^k (a whole number
        when ``integer``) and whose edges are multiples of it: at most ``max_bins`` + 2 bins."""
        if not (math.isfinite(low) and math.isfinite(high)) or high < low:
            raise ValueError(f"bins need a finite range low <= high, got {low} .. {high}")
        if integer:
            low, high = math.floor(low), math.ceil(high)
            step = max(1, round(round_step(max(high - low + 1, 1) / max_bins)))
            if step == 1:  # one bar per number, centred on it
                return cls(np.arange(low, high + 2, dtype=np.float64) - 0.5, integer=True)
            first, last = low // step, high // step + 1
            return cls(np.arange(first, last + 1, dtype=np.float64) * step, integer=True)
        span = high - low or max(abs(low), 1.0) * 0.1
        step = round_step(span / max_bins)
        first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
        last = max(last, first + 1)
        return cls(np.round(np.arange(first, last + 1) * step, 12))

    @classmethod
    def of(
        cls,
        values: Sequence[float] | np.ndarray,
        *,
        low: float | None = None,
        high: float | None = None,
        max_bins: int = MAX_BINS,
        integer: bool = False,
    ) -> Bins:
        """``values`` counted in :meth:`round` bins over ``[low, high]`` (default: their
        smallest and largest; 0 .. 1 when there are none)."""
        values = np.asarray(values, dtype=np.float64)
        if low is None:
            low = float(values.min()) if len(values) else 0.0
        if high is None:
            high = float(values.max()) if len(values) else max(low, 1.0)
        bins = cls.round(low, high, max_bins=max_bins, integer=integer)
        bins.add(values)
        return bins

    def add(self, values: Sequence[float] | np.ndarray) -> None:
        """Count ``values`` (in place); values outside the edges count in the first or last bin."""
        values = np.clip(np.asarray(values, dtype=np.float64), self.edges[0], self.edges[-1])
        np.add(self.counts, np.histogram(values, bins=self.edges)[0], out=self.counts)

    def span_text(self, i: int) -> str:
        """Bin ``i`` in words: ``"0.805 to 0.810"``, ``"7"`` or ``"10 to 19"`` (whole numbers)."""
        lo, hi = self.edges[i], self.edges[i + 1]
        if self.integer:
            if hi - lo == 1 and lo % 1:
                return f"{lo + 0.5:,.0f}"
            return f"{lo:,.0f} to {hi - 1:,.0f}"
        decimals = max(0, -math.floor(math.log10(hi - lo) + 1e-9))
        return f"{lo:.{decimals}f} to {hi:.{decimals}f}"


def histogram_svg(
    bins: Bins,
    x_label: str,
    y_label: str,
    *,
    marker: float | None = None,
    marker_label: str | None = None,
    width: int = 640,
    height: int = 260,
) -> str:
    """The histogram of every report: one bar per bin, both axes titled, round ticks covering
    the bins.

    Args:
        bins: the counts (:meth:`Bins.of` or :meth:`Bins.round` give round edges).
        x_label, y_label: axis titles (what is binned; what is counted).
        marker: a value on the x axis drawn as a dashed line (e.g. the threshold in use).
        marker_label: its label; default ``"threshold {marker:g}"``.
        width, height: the picture's size in pixels.

    Example:
        >>> svg = histogram_svg(Bins.of(sizes, integer=True), "cluster size", "clusters")
    """
    edges, counts = bins.edges, bins.counts
    frame = _frame(
        (float(edges[0]), float(edges[-1])),
        (0.0, float(max(int(counts.max()), 1))),
        width,
        height,
        integer_x=bins.integer,
    )
    parts = frame.open(f"{y_label} by {x_label}")
    base = frame.top + frame.plot_h
    for i, count in enumerate(counts.tolist()):
        x0, x1 = frame.x(float(edges[i])), frame.x(float(edges[i + 1]))
        y = frame.y(count)
        parts.append(
            f'<rect x="{x0 + 0.5:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 1, 0.5):.1f}" '
            f'height="{base - y:.1f}" fill="{BAR_COLOUR}">'
            f"<title>{bins.span_text(i)}: {count:,} {escape(y_label)}</title></rect>"
        )
    parts += frame.marker(marker, marker_label)
    parts += frame.close(x_label, y_label)
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
        x_range: the x axis (default: the points' smallest to largest x), widened to round ticks.
        y_range: the y axis; default ``0 .. the largest y`` with whole-number ticks (counts).
        marker: a value on the x axis drawn as a dashed line (e.g. the threshold in use).
        marker_label: its label; default ``"threshold {marker:g}"``.
        legend: write each series' name in its colour at the top right.
        aria_label: the picture's accessible name (default ``"y_label by x_label"``).
        width, height: the picture's size in pixels.
    """
    xs = [float(x) for line in series for x in line.xs]
    ys = [float(y) for line in series for y in line.ys]
    x_span = x_range or ((min(xs), max(xs)) if xs else (0.0, 1.0))
    if y_range is None:
        frame = _frame(x_span, (0.0, max(max(ys, default=0.0), 1.0)), width, height)
    else:
        frame = _frame(x_span, y_range, width, height, integer_y=False)
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
