"""The exact mode's run: every vector against every vector, in one search of the whole matrix
(``WholeExactPairs``) when its memory fits a worker, else by query ranges that Beam workers
search (``ExactPairs``); the same shards either way. The job passes the callable that runs a
pipeline, so this package never imports ``jobs``. The search the launcher runs itself imports
no Beam: the transforms are imported only to build a pipeline."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np
import pyarrow as pa
from sbert_pipeline.pairs.defaults import ROWS_PER_RANGE
from sbert_pipeline.pairs.exact_search import plan_ranges, search_all
from sbert_pipeline.pairs.plan import (
    exact_path,
    exact_worker_bytes,
    whole_matrix_bytes,
)
from sbert_pipeline.pairs.settings import PairsSettings

if TYPE_CHECKING:
    import apache_beam as beam


class FinishedRun(Protocol):
    """What the job's pipeline runner returns: the seconds the pipeline ran and its runner."""

    seconds: float
    runner: str


RunTransform = Callable[[str, "beam.PTransform"], FinishedRun]


@dataclass(frozen=True)
class InProcessRun:
    """The whole-matrix search run by the launcher itself (no pipeline)."""

    seconds: float
    runner: str = "in-process"


ExactPath = Literal["whole", "ranges"]


def run_exact(
    settings: PairsSettings,
    n: int,
    dim: int,
    ranges: int | None,
    run: RunTransform,
    budget: int,
    path: ExactPath | None = None,
    loaded: tuple[pa.Array, np.ndarray] | None = None,
) -> tuple[dict, FinishedRun]:
    """Search ``n`` vectors exactly; one output shard per query range (default one per 10,000
    rows).

    Args:
        path: ``whole`` (one search of every row) or ``ranges``; ``None`` chooses ``whole``
            when :func:`sbert_pipeline.pairs.plan.whole_matrix_bytes` fits ``budget``.
        loaded: every id and vector in id order (:meth:`VectorReader.scan` with ``keep``),
            where the launcher runs locally: the whole-matrix search then runs here, on them,
            without a pipeline (a local pipeline would run it in this process anyway, after
            reading the vectors a second time).

    Returns ``(manifest details, the finished run)``.
    """
    threshold = settings.threshold is not None
    path = path or exact_path(n, dim, settings.k, threshold, budget)
    planned = plan_ranges(n, ranges or math.ceil(n / ROWS_PER_RANGE))
    if path == "whole" and loaded is not None:
        start = time.perf_counter()
        for _ in search_all(settings, *loaded, planned):
            pass
        finished = InProcessRun(time.perf_counter() - start)
        needed = whole_matrix_bytes(n, dim, settings.k, threshold)
    elif path == "whole":
        from sbert_pipeline.pairs.exact_transforms import WholeExactPairs  # loads Beam

        finished = run("WholeExactPairs", WholeExactPairs(settings, planned))
        needed = whole_matrix_bytes(n, dim, settings.k, threshold)
    else:
        from sbert_pipeline.pairs.exact_transforms import ExactPairs  # loads Beam

        finished = run("ExactPairs", ExactPairs(settings, planned))
        needed = exact_worker_bytes(n, dim)
    details = {"ranges": len(planned), "path": path, "worker_bytes_needed": needed}
    return details, finished
