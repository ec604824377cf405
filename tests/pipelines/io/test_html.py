"""io/html.py: the one chart helper of every report (valid SVG, round ticks, the marker)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
from sbert_pipeline.io.html import Bins, Series, histogram_svg, line_chart_svg, lines_svg
from sbert_pipeline.io.ticks import axis_ticks

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    return [node.text for node in ET.fromstring(svg).iter(f"{SVG}text")]


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.5, 1.0, [0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
        (0.0, 37.0, [0.0, 10.0, 20.0, 30.0, 40.0]),
        (-1.0, 1.0, [-1.0, -0.5, 0.0, 0.5, 1.0]),
        (0.9, 0.96, [0.9, 0.92, 0.94, 0.96]),
        (3.0, 3.0, [3.0, 3.1, 3.2, 3.3]),
    ],
)
def test_axis_ticks_are_round_and_cover_the_range(low, high, expected):
    assert axis_ticks(low, high) == pytest.approx(expected)


def test_bar_chart_labels_round_ticks_and_marks_the_threshold():
    edges = np.linspace(0.5, 1.0, 41)  # 40 similarity bins from 0.5
    counts = np.arange(40) * 3
    svg = histogram_svg(Bins(edges, counts), "cosine similarity", "pairs", marker=0.83)
    root = ET.fromstring(svg)
    assert len(root.findall(f"{SVG}rect")) == 40
    texts = _texts(svg)
    # x ticks at round values with the decimals the step needs (not 0.62 / 0.75 / 0.88 ...)
    for tick in ("0.5", "0.6", "0.7", "0.8", "0.9", "1.0"):
        assert tick in texts
    assert "0" in texts and "100" in texts  # y ticks: whole counts from 0 (tallest is 117)
    assert "threshold 0.83" in texts and "cosine similarity" in texts and "pairs" in texts
    assert "threshold" not in histogram_svg(Bins(edges, counts), "x", "y", marker=0.2)  # outside


def test_bar_chart_refuses_edges_that_do_not_fit_the_counts():
    with pytest.raises(ValueError, match="3 bins need 4 edges, got 3"):
        Bins([0.0, 0.5, 1.0], [1, 2, 3])


def test_labels_are_escaped():
    svg = histogram_svg(Bins([0.0, 1.0], [1]), "a <b>", "c & d", marker=0.5, marker_label="<t>")
    assert "<b>" not in svg and "&lt;b&gt;" in svg and "&amp;" in svg and "&lt;t&gt;" in svg
    ET.fromstring(svg)


def test_line_chart_highlights_the_marked_point():
    svg = line_chart_svg([0.8, 0.9, 1.0], [10, 4, 0], "threshold", "rows removed", marker=0.9)
    circles = ET.fromstring(svg).findall(f"{SVG}circle")
    assert [c.get("r") for c in circles] == ["3", "4", "3"]
    empty = ET.fromstring(line_chart_svg([], [], "threshold", "rows removed"))
    assert empty.findall(f"{SVG}circle") == []


def test_cluster_size_ticks_are_whole_numbers():
    texts = _texts(histogram_svg(Bins.of([1, 1, 2, 3, 3, 3, 9], integer=True), "size", "clusters"))
    numbers = [t for t in texts if t.replace(".", "").isdigit()]
    assert numbers and all("." not in t for t in numbers)


def test_lines_chart_on_fixed_ranges_with_a_legend():
    first = Series("star", [0.2, 0.6, 0.9], [1.0, 0.8, 0.5], highlight=1, stroke_width=3)
    second = Series("components", [0.3, 0.95], [0.9, 0.2], colour="#f58518")
    svg = lines_svg(
        [first, second],
        "recall",
        "precision",
        x_range=(0.0, 1.0),
        y_range=(0.0, 1.0),
        legend=True,
        aria_label="precision-recall curve",
    )
    root = ET.fromstring(svg)
    assert root.get("aria-label") == "precision-recall curve"
    assert len(root.findall(f"{SVG}polyline")) == 2
    assert [c.get("r") for c in root.findall(f"{SVG}circle")] == ["3", "4", "3", "3", "3"]
    texts = _texts(svg)
    assert {"star", "components", "0.0", "0.2", "1.0"} <= set(texts)
    with pytest.raises(ValueError, match="star: 2 x values but 1 y values"):
        Series("star", [0.1, 0.2], [0.5])
