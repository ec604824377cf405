"""Round axis ticks for the report charts (:mod:`sbert_pipeline.io.html`), and label widths.

Ticks are steps of 1, 2 or 5 times a power of ten. :func:`axis_ticks` covers a range (the first
tick at or below its low end, the last at or above its high end); :func:`fitted_ticks` picks the
most such ticks whose labels keep apart on an axis of a given length.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

# Tick labels: 11 px text; no digit, comma or point of it is wider than this (px per character).
CHAR_PX = 7.0
FONT_PX = 11
LABEL_GAP_PX = 10  # the least free space between two neighbouring tick labels


def round_step(raw: float) -> float:
    """The smallest of 1, 2 or 5 x 10^k that is >= ``raw`` (> 0)."""
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))


def axis_ticks(low: float, high: float, count: int = 6, *, integer: bool = False) -> list[float]:
    """Round values covering ``[low, high]``: the first ``<= low``, the last ``>= high``, at most
    ``count`` of them (at least 2), evenly spaced by 1, 2 or 5 x 10^k (a whole number when
    ``integer``)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError(f"an axis needs a finite range, got {low} .. {high}")
    if high <= low:
        high = low + (1.0 if integer or low == 0 else abs(low) * 0.1)
    count = max(count, 2)
    raw = (high - low) / (count - 1)
    while True:
        step = round_step(raw)
        if integer:
            step = max(1.0, float(round(step)))
        first, last = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
        if last == first:
            last += 1
        if last - first + 1 <= count:
            # Multiples of the step, rounded so 0.1 * 3 is written 0.3; + 0.0 turns -0.0 into 0.
            return [round(k * step, 12) + 0.0 for k in range(first, last + 1)]
        raw = step * 1.01  # covering needed one tick more than allowed: the next round step


def tick_text(value: float, ticks: Sequence[float]) -> str:
    """A tick's label: as many decimals as the step between ticks needs, thousands with commas."""
    step = (ticks[1] - ticks[0]) if len(ticks) > 1 else abs(value) or 1.0
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{value:,.{decimals}f}"


def text_px(text: str, font_px: int = FONT_PX) -> float:
    """An upper bound of the width of ``text`` in the charts' sans-serif font, in pixels."""
    return len(text) * CHAR_PX * font_px / FONT_PX


def fitted_ticks(
    low: float,
    high: float,
    length_px: float,
    size_px: Callable[[str], float],
    *,
    integer: bool,
    most: int = 8,
) -> list[float]:
    """The most covering ticks (up to ``most``) whose labels do not touch over ``length_px``:
    ``size_px(label)`` is a label's extent along the axis."""
    ticks = axis_ticks(low, high, 2, integer=integer)
    for count in range(most, 1, -1):
        candidate = axis_ticks(low, high, count, integer=integer)
        texts = [tick_text(value, candidate) for value in candidate]
        spacing = length_px / max(len(candidate) - 1, 1)
        if spacing >= max(size_px(text) for text in texts) + LABEL_GAP_PX:
            return candidate
        ticks = candidate
    return ticks
