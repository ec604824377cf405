"""The exact mode's run: every vector against every vector, in one search of the whole matrix
(``WholeExactPairs``) when its memory fits a worker, else by query ranges that Beam workers
search (``ExactPairs``); the same shards either way. The job passes the callable that runs a
pipeline, so this package never imports ``jobs``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal, Protocol

import apache_beam as beam

from pipelines.pairs.plan import (
    ROWS_PER_RANGE,
    exact_path,
    exact_worker_bytes,
    whole_matrix_bytes,
)
from pipelines.pairs.transforms import ExactPairs, PairsSettings, WholeExactPairs, plan_ranges


class FinishedRun(Protocol):
    """What the job's pipeline runner returns: the seconds the pipeline ran and its runner."""

    seconds: float
    runner: str


RunTransform = Callable[[str, beam.PTransform], FinishedRun]
ExactPath = Literal["whole", "ranges"]


def run_exact(
    settings: PairsSettings,
    n: int,
    dim: int,
    ranges: int | None,
    run: RunTransform,
    budget: int,
    path: ExactPath | None = None,
) -> tuple[dict, FinishedRun]:
    """Search ``n`` vectors exactly; one output shard per query range (default one per 10,000
    rows).

    Args:
        path: ``whole`` (one search of every row) or ``ranges``; ``None`` chooses ``whole``
            when :func:`pipelines.pairs.plan.whole_matrix_bytes` fits ``budget``.

    Returns ``(manifest details, the finished run)``.
    """
    threshold = settings.threshold is not None
    path = path or exact_path(n, dim, settings.k, threshold, budget)
    planned = plan_ranges(n, ranges or math.ceil(n / ROWS_PER_RANGE))
    if path == "whole":
        finished = run("WholeExactPairs", WholeExactPairs(settings, planned))
        needed = whole_matrix_bytes(n, dim, settings.k, threshold)
    else:
        finished = run("ExactPairs", ExactPairs(settings, planned))
        needed = exact_worker_bytes(n, dim)
    details = {"ranges": len(planned), "path": path, "worker_bytes_needed": needed}
    return details, finished
