"""Pieces of the self-contained HTML reports (cluster, dedup, sbert run)."""

from __future__ import annotations

import numpy as np
from apache_beam.io.filesystems import FileSystems

# Texts longer than this are cut in the report (summary.parquet keeps them whole).
REPORT_TEXT_CHARS = 300


def size_histogram_svg(sizes: np.ndarray, *, width: int = 640, height: int = 260) -> str:
    """An SVG bar chart: how many clusters have each size (binned), axes labelled."""
    sizes = np.asarray(sizes, dtype=np.int64)
    left, right, top, bottom = 56, 16, 16, 44
    plot_w, plot_h = width - left - right, height - top - bottom
    if len(sizes) == 0:
        sizes = np.zeros(1, np.int64)
    n_bins = int(min(30, max(1, len(np.unique(sizes)))))
    counts, edges = np.histogram(sizes, bins=n_bins)
    tallest = max(int(counts.max()), 1)
    bar_w = plot_w / n_bins
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="cluster size histogram">',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#333"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#333"/>',
    ]
    for i, count in enumerate(counts):
        bar_h = plot_h * count / tallest
        x, y = left + i * bar_w, top + plot_h - bar_h
        label = f"{edges[i]:.0f}-{edges[i + 1]:.0f}: {count} clusters"
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{max(bar_w - 2, 1):.1f}" '
            f'height="{bar_h:.1f}" fill="#4c78a8"><title>{label}</title></rect>'
        )
    for value, x in ((edges[0], left), (edges[-1], left + plot_w)):
        parts.append(
            f'<text x="{x}" y="{top + plot_h + 16}" font-size="11" text-anchor="middle">'
            f"{value:.0f}</text>"
        )
    parts += [
        f'<text x="{left - 6}" y="{top + 10}" font-size="11" text-anchor="end">{tallest}</text>',
        f'<text x="{left - 6}" y="{top + plot_h}" font-size="11" text-anchor="end">0</text>',
        f'<text x="{left + plot_w / 2}" y="{height - 8}" font-size="12" text-anchor="middle">'
        "cluster size (members)</text>",
        f'<text x="14" y="{top + plot_h / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2})">clusters</text>',
        "</svg>",
    ]
    return "\n".join(parts)


def write_text(path: str, text: str, mime_type: str = "text/html") -> None:
    """Write a text file on any Beam filesystem."""
    with FileSystems.create(path, mime_type=mime_type) as handle:
        handle.write(text.encode("utf-8"))
