"""The pairs stage's memory budget (``--memory-budget``): what the run will hold, worked out
from the embeddings manifests' row count and dimension before any vector is read, refused
when it does not fit, and the share of the budget a clustered worker may use.

What is counted (sizes from :mod:`sbert_pipeline.pairs.plan`):

- exact, searched in this process: the whole-matrix search (:func:`whole_matrix_bytes`) or a
  worker holding every vector (:func:`exact_worker_bytes`);
- clustered: the launcher's ids, k-means sample and exact-truth queries
  (:func:`clustered_launcher_bytes`) plus, where the workers run in this process, one worker
  holding one group of blocks (:func:`block_worker_bytes`); the groups are sized to what the
  budget leaves, so a smaller budget means more, smaller groups, not other results;
- workers elsewhere (Dataflow, ...): only the launcher's part counts here.
"""

from __future__ import annotations

from dataclasses import dataclass

from sbert_pipeline.io.resources import MemoryBudget, require_memory
from sbert_pipeline.pairs.defaults import DEFAULT_MAX_BLOCK
from sbert_pipeline.pairs.plan import (
    BYTES_PER_ID,
    WORKER_OVERHEAD,
    BlockingRequest,
    block_worker_bytes,
    clustered_launcher_bytes,
    exact_path,
    exact_worker_bytes,
    whole_matrix_bytes,
)

_SMALLER_CLUSTERED = (
    "use a smaller --max-block (smaller blocks) or a smaller --sample, or run the workers "
    "elsewhere (--runner=DataflowRunner)"
)


@dataclass(frozen=True)
class MemoryPlan:
    """The budget, what the run needs of it, and the memory a clustered worker may use."""

    budget: MemoryBudget
    needed: int
    worker_bytes: int  # --worker-memory, less where the budget leaves a worker less

    def describe(self, peak: int) -> dict:
        """What the manifest records: the budget, the need counted, the peak RSS measured."""
        return {**self.budget.to_json(), "needed_bytes": self.needed, "peak_rss_bytes": peak}


def check_memory(
    budget: MemoryBudget,
    method: str,
    n: int,
    dim: int,
    request: BlockingRequest,
    *,
    threshold: bool,
    worker_memory: int,
    here: bool,
) -> MemoryPlan:
    """Refuse a run that would not fit ``budget`` (before reading the vectors); else its plan.

    Args:
        method: ``exact`` or ``clustered`` (as chosen).
        n, dim: rows and dimension, from the embeddings manifests.
        request: the clustered options (``k`` is used by both methods).
        threshold: whether pairs above a threshold are searched.
        worker_memory: ``--worker-memory`` in bytes.
        here: whether the workers run in this process (a local runner).

    Raises:
        ResourceError: the run needs more than the budget; the message says what to change.
    """
    if n == 0:
        return MemoryPlan(budget, 0, worker_memory)
    ids = n * BYTES_PER_ID + WORKER_OVERHEAD
    if method == "exact":
        if not here:
            needed, what = ids, f"checking the {n:,} ids of the embeddings"
        elif exact_path(n, dim, request.k, threshold, worker_memory) == "whole":
            needed = whole_matrix_bytes(n, dim, request.k, threshold)
            what = f"the exact search of {n:,} vectors of {dim} float32 in one pass"
        else:
            needed = exact_worker_bytes(n, dim)
            what = f"an exact-mode worker holding all {n:,} vectors of {dim} float32"
        change = "use --method clustered (a worker holds one group of blocks, not every vector)"
        require_memory(needed, budget, what, change)
        return MemoryPlan(budget, needed, worker_memory)
    launcher = clustered_launcher_bytes(request, n, dim)
    if not here:
        require_memory(
            launcher + WORKER_OVERHEAD,
            budget,
            f"the clustered launcher of {n:,} vectors (ids, k-means sample, exact-truth queries)",
            "use a smaller --sample, --tune-sample or --recall-sample",
        )
        return MemoryPlan(budget, launcher + WORKER_OVERHEAD, worker_memory)
    block = min(request.max_block or DEFAULT_MAX_BLOCK, n)
    needed = launcher + block_worker_bytes(block, dim)
    require_memory(
        needed,
        budget,
        f"clustered pairs of {n:,} vectors of {dim} float32 (ids, k-means sample and "
        f"exact-truth queries, and a worker searching a block of {block:,} vectors)",
        _SMALLER_CLUSTERED,
    )
    worker = min(worker_memory, budget.bytes - launcher)
    return MemoryPlan(budget, needed, worker)
