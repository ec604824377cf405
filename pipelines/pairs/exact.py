"""The exact mode's run: every vector against every vector, query rows cut into ranges that
Beam workers search (``ExactPairs``); the job passes the callable that runs a pipeline, so this
package never imports ``jobs``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import apache_beam as beam

from pipelines.pairs.plan import ROWS_PER_RANGE, exact_worker_bytes
from pipelines.pairs.transforms import ExactPairs, PairsSettings, plan_ranges


class FinishedRun(Protocol):
    """What the job's pipeline runner returns: the seconds the pipeline ran and its runner."""

    seconds: float
    runner: str


RunTransform = Callable[[str, beam.PTransform], FinishedRun]


def run_exact(
    settings: PairsSettings, n: int, dim: int, ranges: int | None, run: RunTransform
) -> tuple[dict, FinishedRun]:
    """Search ``n`` vectors exactly in ``ranges`` query ranges (default one per 10,000 rows).

    Returns ``(manifest details, the finished run)``.
    """
    planned = plan_ranges(n, ranges or math.ceil(n / ROWS_PER_RANGE))
    finished = run("ExactPairs", ExactPairs(settings, planned))
    details = {"ranges": len(planned), "worker_bytes_needed": exact_worker_bytes(n, dim)}
    return details, finished
