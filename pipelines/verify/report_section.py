"""The verify stage's section of ``report.html``: how many pairs the cross-encoder scored, how
their scores moved against the bi-encoder's cosines, and a histogram of the verified scores."""

from __future__ import annotations

import pyarrow.parquet as pq
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.html import Bins, histogram_svg
from sbert_pipeline.io.pairs_output import PairsOutput
from sbert_pipeline.stage_api.job_stage import ReportContext
from sbert_pipeline.stage_api.report_parts import escape

SCORE_AXIS = "verified score of the pair (cross-encoder)"


def verify_sections(context: ReportContext) -> list[str]:
    """The counts, the score movement and the histogram of the verified scores, with the dedup
    threshold (which cuts these scores) when dedup runs."""
    dedup = context.options.get("dedup")
    with content_checks(context.verify):  # files the stages checked are not hashed again
        output = PairsOutput.open(context.outputs["verify"])
        return [_verified(output, dedup.threshold if dedup is not None else None)]


def _verified(output: PairsOutput, dedup_threshold: float | None) -> str:
    section = output.manifest["verify"]
    counts, moved = section["counts"], section["movement"]
    band = section.get("band")
    where = (
        f"whose cosine lies in [{band[0]:g}, {band[1]:g})" if band is not None else "(every pair)"
    )
    rate = section.get("pairs_per_second")
    speed = f" at {rate:g} pairs/s" if rate else ""
    text = (
        f"<h2>Verified pairs</h2><p>The cross-encoder <code>"
        f"{escape(str(section['model'].get('model_id')))}</code> scored {counts['scored']} of "
        f"{counts['read']} candidate pairs {where}{speed}; {counts['above_band']} above the band "
        f"kept score 1 and {counts['below_band']} below it score 0.</p>"
    )
    if moved.get("mean_abs_change") is not None:
        text += (
            f"<p>Against their cosines, {moved['up']} scored pairs crossed {moved['cut']:g} "
            f"upwards and {moved['down']} downwards; mean cosine {moved['mean_cosine']:.3f}, "
            f"mean verified score {moved['mean_score']:.3f}, mean |score - cosine| "
            f"{moved['mean_abs_change']:.3f}.</p>"
        )
    if dedup_threshold is not None:
        text += f"<p>The dashed line marks the dedup threshold {dedup_threshold:g}.</p>"
    return text + _histogram(output, dedup_threshold)


def _histogram(output: PairsOutput, marker: float | None) -> str:
    """Histogram of the verified scores, streamed (bounded memory)."""
    bins = Bins.round(0.0, 1.0)
    for path in output.pair_files:
        with FileSystems.open(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(columns=["score"]):
                scores = batch.column("score").to_numpy(zero_copy_only=False)
                bins.add(scores)
    return histogram_svg(bins, SCORE_AXIS, "pairs", marker=marker)
