"""The pairs stage's section of ``report.html``: the histogram of the similar pairs' scores,
with the dedup threshold when dedup runs."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.html import SIMILARITY_AXIS, Bins, histogram_svg
from sbert_pipeline.io.pairs_output import PairsOutput
from sbert_pipeline.stage_api.job_stage import ReportContext


def pairs_sections(context: ReportContext) -> list[str]:
    """The histogram of the similar pairs' scores, with the dedup threshold when dedup runs."""
    dedup = context.options.get("dedup")
    # With verify in the job, dedup's threshold applies to the cross-encoder's scores, not to
    # these cosines: no line is drawn (verify's section shows the scores dedup cut).
    verified = "verify" in context.options
    threshold = dedup.threshold if dedup is not None and not verified else None
    low = context.options["pairs"].threshold
    # Files the stages checked are not hashed again (the check remembers them); with
    # verify: false the report does not check them either.
    with content_checks(context.verify):
        return [_similarity(context.outputs["pairs"], low, threshold)]


def _similarity(pairs_dir: str, low: float, dedup_threshold: float | None) -> str:
    """Histogram of the similar pairs' scores, streamed (bounded memory), with the dedup cut."""
    bins = Bins.round(low, 1.0)
    above = 0
    # Compared in float32, as the pairs and dedup stages compare scores with thresholds.
    cut_at = np.float32(dedup_threshold if dedup_threshold is not None else np.inf)
    for path in PairsOutput.open(pairs_dir).pair_files:
        with FileSystems.open(path) as handle:
            for batch in pq.ParquetFile(handle).iter_batches(columns=["score"]):
                scores = batch.column("score").to_numpy(zero_copy_only=False)
                bins.add(scores)
                above += int(np.count_nonzero(scores >= cut_at))
    cut = ""
    if dedup_threshold is not None:
        cut = (
            f" The dashed line marks the dedup threshold {dedup_threshold:g}: {above} pairs are "
            "at or above it."
        )
    return (
        f"<h2>Pair similarity</h2><p>{int(bins.counts.sum())} pairs with cosine similarity "
        f">= {low:g}.{cut}</p>"
        + histogram_svg(bins, SIMILARITY_AXIS, "pairs", marker=dedup_threshold)
    )
