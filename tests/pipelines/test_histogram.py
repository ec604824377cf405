"""The one histogram of every report (io/html.histogram_svg): round bins, round ticks that cover
the data, titled axes, tick labels that keep apart; and every report's histograms use it."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.cluster.cluster_summaries import ClusterProfile
from sbert_pipeline.cluster.cluster_summaries import clusters_report_html as cluster_report
from sbert_pipeline.cluster.report_section import _cluster_sizes
from sbert_pipeline.dedup.report import report_page as dedup_report
from sbert_pipeline.dedup.summary import similarity_histogram
from sbert_pipeline.io.html import SIMILARITY_AXIS, SIZE_AXIS, Bins, histogram_svg
from sbert_pipeline.io.ticks import FONT_PX, text_px
from sbert_pipeline.pairs.report_section import _similarity

SVG = "{http://www.w3.org/2000/svg}"


def _ticks(svg: ET.Element, axis: str) -> list[ET.Element]:
    return [node for node in svg.iter(f"{SVG}text") if node.get("class") == f"{axis}-tick"]


def _value(text: str) -> float:
    return float(text.replace(",", ""))


def _is_round_step(step: float) -> bool:
    """1, 2 or 5 times a power of ten."""
    mantissa = step / 10.0 ** math.floor(math.log10(step) + 1e-9)
    return any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 5, 10))


def check_axes(svg_text: str, data_low: float, data_high: float, count_high: int) -> None:
    """Round ticks covering the data on x and the counts on y; titled axes; labels apart."""
    svg = ET.fromstring(svg_text)
    for axis, low, high in (("x", data_low, data_high), ("y", 0, count_high)):
        nodes = _ticks(svg, axis)
        values = [_value(node.text) for node in nodes]
        assert len(values) >= 2, (axis, values)
        steps = np.diff(values)
        assert np.allclose(steps, steps[0]) and _is_round_step(steps[0]), (axis, values)
        # Every tick is a multiple of the step (0.85, not 0.8375) and the ticks cover the data.
        assert all(math.isclose(v / steps[0], round(v / steps[0]), abs_tol=1e-6) for v in values)
        assert values[0] <= low + 1e-9 and values[-1] >= high - 1e-9, (axis, values, low, high)
        positions = [float(node.get("x" if axis == "x" else "y")) for node in nodes]
        if axis == "x":  # neighbouring labels (centred) do not touch
            placed = list(zip(positions, nodes, strict=True))
            for (p, n), (q, m) in itertools.pairwise(placed):
                assert q - p >= (text_px(n.text) + text_px(m.text)) / 2, (n.text, m.text)
        else:  # one line of text apart
            assert all(abs(b - a) >= FONT_PX for a, b in itertools.pairwise(positions))
    titles = {node.get("class") for node in svg.iter(f"{SVG}text")}
    assert {"x-title", "y-title"} <= titles
    # The y labels fit left of the axis, right of the rotated y title (x 8 .. 20).
    axis_x = float(next(svg.iter(f"{SVG}line")).get("x1"))
    for node in _ticks(svg, "y"):
        assert float(node.get("x")) - text_px(node.text) >= 20 and float(node.get("x")) < axis_x


@pytest.mark.parametrize(
    ("low", "high", "step"),
    [(0.8, 1.0, 0.005), (0.5, 1.0, 0.02), (0.83, 0.97, 0.005), (-1.0, 1.0, 0.05)],
)
def test_round_bins_have_round_edges_that_cover_the_range(low, high, step):
    bins = Bins.round(low, high)
    widths = np.diff(bins.edges)
    assert np.allclose(widths, step)
    assert np.allclose(bins.edges / step, np.round(bins.edges / step))
    assert bins.edges[0] <= low and bins.edges[-1] >= high and len(widths) <= 42


def test_whole_number_bins_count_every_value_once():
    sizes = np.array([1, 1, 2, 3, 3, 3, 9, 9])
    narrow = Bins.of(sizes, integer=True)
    assert np.allclose(np.diff(narrow.edges), 1) and narrow.counts.sum() == len(sizes)
    assert [narrow.span_text(i) for i in (0, 8)] == ["1", "9"]
    assert narrow.counts[0] == 2 and narrow.counts[-1] == 2
    wide = Bins.of(np.arange(1, 2001), integer=True)
    assert wide.counts.sum() == 2000 and len(wide.counts) <= 42
    assert np.all(wide.edges % 1 == 0) and wide.span_text(0) == "0 to 49"


@pytest.mark.parametrize(
    "values",
    [
        np.random.default_rng(0).normal(0.86, 0.03, 20_000).clip(0.8, 1.0),
        np.array([0.9]),
        np.array([0.8123, 0.9871]),
    ],
)
def test_similarity_histogram_ticks_are_round_and_cover_the_data(values):
    bins = Bins.of(values, low=0.8, high=1.0)
    assert bins.counts.sum() == len(values)
    check_axes(
        histogram_svg(bins, SIMILARITY_AXIS, "pairs", marker=0.85),
        0.8,
        1.0,
        int(bins.counts.max()),
    )


@pytest.mark.parametrize(
    "sizes", [[2, 2, 3, 9], [5], list(range(1, 500)), [1] * 3 + [123_456], [40_000] * 7]
)
def test_size_histogram_ticks_are_whole_round_numbers_covering_the_sizes(sizes):
    bins = Bins.of(sizes, integer=True)
    svg = histogram_svg(bins, SIZE_AXIS, "clusters")
    check_axes(svg, min(sizes), max(sizes), int(bins.counts.max()))
    assert all("." not in node.text for node in _ticks(ET.fromstring(svg), "x"))


def test_large_counts_get_a_wider_margin_not_overlapping_labels():
    bins = Bins.round(0.0, 1.0)
    bins.add(np.full(12_345_678, 0.5))
    check_axes(histogram_svg(bins, "x", "pairs"), 0.0, 1.0, 12_345_678)


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", page, flags=re.DOTALL)


def test_every_report_histogram_is_the_one_helper(tmp_path):
    # dedup report.html: the pair similarities in 0.01 bins from the lowest loaded score
    scores = np.array([0.81, 0.83, 0.9, 0.97, 0.999], np.float32)
    histogram = similarity_histogram(scores, 0.8)
    page = dedup_report({}, histogram, 0.85, [], [], total_groups=0)
    svg = next(s for s in _svgs(page) if SIMILARITY_AXIS in s)
    check_axes(svg, 0.8, 1.0, int(histogram.counts.max()))

    # cluster report.html: the cluster sizes
    profiles = [
        ClusterProfile(c, size, None, [], [], [], [], [])
        for c, size in enumerate([3, 17, 250, 251])
    ]
    page = cluster_report(profiles, {})
    svg = next(s for s in _svgs(page) if SIZE_AXIS in s)
    check_axes(svg, 3, 251, 2)

    # sbert run's report.html: the cluster sizes and the similar pairs' scores
    summary = tmp_path / "summary.parquet"
    pq.write_table(pa.table({"size": pa.array([3, 17, 250, 251], pa.int64())}), summary)
    check_axes(_svgs(_cluster_sizes(str(tmp_path)))[0], 3, 251, 2)
    (tmp_path / "pairs").mkdir()
    pq.write_table(
        pa.table({"score": pa.array(scores)}), tmp_path / "pairs" / "part-00000-of-00001.parquet"
    )
    (tmp_path / "_manifest.json").write_text('{"kind": "pairs"}')  # the pairs stage's folder
    section = _similarity(str(tmp_path), 0.8, 0.85)
    assert "5 pairs" in section
    check_axes(_svgs(section)[0], 0.8, 1.0, 1)
