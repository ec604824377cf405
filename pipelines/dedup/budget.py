"""The memory a dedup run needs, from its input manifests, checked against ``--memory-budget``
before any pair is read (Beam-free).

Dedup holds the pairs as columns (two int64 row arrays and a float32 score per pair,
:class:`pipelines.dedup.groups.IndexedPairs`) and a few ``(n,)`` arrays per row, so its memory
is linear in rows and pairs: :func:`dedup_memory`. The constants are on the safe side of what
``benchmarks/dedup_stage_scale.py`` measured (2M rows and 9.5M pairs: peak RSS 1.84 GiB against
an estimate of 2.83 GiB): reading maps the pairs' string ids to rows (the Arrow strings and
their row numbers live together for a moment), the sweep's :class:`pipelines.dedup.adjacency.
PairGraph` lists every pair twice, and each threshold holds the pairs at or above it once more.
"""

from __future__ import annotations

from pipelines.io.embeddings import EmbeddingsDataset, count_rows
from pipelines.io.pairs_output import PairsOutput
from pipelines.io.resources import MemoryBudget, require_memory
from pipelines.io.sizes import format_size

# Bytes per pair at the peak: the Arrow ids and scores read, the row pairs, their sort order,
# and a threshold's subset, with the sweep's adjacency (benchmarks/dedup_stage_scale.py).
BYTES_PER_PAIR = 160
# Bytes per row: the id as a Python string and its row in a dict, about ten (n,) int64 arrays
# of the groupings and the rankings.
BYTES_PER_ROW = 600
# The interpreter, numpy, pyarrow and scipy loaded.
BASE_BYTES = 300 * 2**20


def dedup_memory(rows: int, pairs: int) -> int:
    """Bytes a dedup run over ``rows`` items and ``pairs`` loaded pairs needs at its peak."""
    return BASE_BYTES + rows * BYTES_PER_ROW + pairs * BYTES_PER_PAIR


def pairs_to_load(pairs_output: PairsOutput, threshold: float) -> int:
    """How many pairs the run reads, from the manifest (the Parquet footers when it has no
    count): ``pairs/``, and the neighbour lists' entries when ``threshold`` lies below the
    pairs' threshold (they are read too, :func:`pipelines.dedup.load.load_pairs`)."""
    manifest = pairs_output.manifest
    count = (manifest.get("counts") or {}).get("pairs")
    if count is None:
        count = (manifest.get("pairs") or {}).get("count")
    total = int(count) if count is not None else count_rows(pairs_output.pair_files)
    floor = pairs_output.threshold
    if (floor is None or threshold < floor) and pairs_output.neighbor_files:
        total += count_rows(pairs_output.neighbor_files) * (pairs_output.k or 1)
    return total


def check_memory(
    budget: MemoryBudget,
    pairs_output: PairsOutput | None,
    datasets: list[EmbeddingsDataset],
    threshold: float,
) -> dict:
    """Refuse a run that would need more than ``budget``; else what it was estimated at.

    Rows come from the embeddings' Parquet footers, pairs from the pairs manifest: nothing
    else is read.

    Returns:
        ``{"budget": ..., "rows": ..., "pairs": ..., "estimate_bytes": ...}`` for the manifest.

    Raises:
        pipelines.io.resources.ResourceError: over the budget (naming the size needed).
    """
    rows = sum(dataset.count for dataset in datasets)
    pairs = 0 if pairs_output is None else pairs_to_load(pairs_output, threshold)
    needed = dedup_memory(rows, pairs)
    require_memory(
        needed,
        budget,
        f"dedup of {rows:,} rows and {pairs:,} pairs (about {BYTES_PER_ROW} bytes a row and "
        f"{BYTES_PER_PAIR} a pair, and {format_size(BASE_BYTES)} of libraries)",
        "raise --threshold / the pairs stage's threshold so that fewer pairs are loaded",
    )
    return {"budget": budget.to_json(), "rows": rows, "pairs": pairs, "estimate_bytes": needed}
