"""The memory a dedup run needs, from its input manifests, checked against ``--memory-budget``
before any pair is read (Beam-free).

Dedup holds the pairs as columns (two int64 row arrays and a float32 score per pair,
:class:`sbert_pipeline.dedup.groups.IndexedPairs`), the ids as one Arrow array
(:class:`sbert_pipeline.dedup.item_ids.ItemIds`) and a few ``(n,)`` arrays per row, so its memory
is linear in rows and pairs on top of what the process already holds: :func:`dedup_memory`.

The per-row and per-pair constants are on the safe side of ``benchmarks/dedup_stage_scale.py``
(star, written output; docs/architecture.md, "Dedup memory"): 5M rows and 3.75M pairs peaked
at 1.66 GB, 5M and 10M at 2.10 GB, 10M and 7.5M at 2.83 GB. What the process holds when the
stage starts is counted as measured (:func:`sbert_pipeline.io.resources.resident_bytes`): inside
``sbert run`` that is the libraries of every stage and what the earlier stages left (0.78 GB
after pairs in a 1M job), which a constant base missed (the 5M job's dedup went 2% over).
"""

from __future__ import annotations

import pyarrow as pa
from sbert_pipeline.dedup.outputs import GROUPS_FILE
from sbert_pipeline.io.embeddings import EmbeddingsDataset, count_rows
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import MANIFEST, join
from sbert_pipeline.io.pairs_output import PairsOutput
from sbert_pipeline.io.resources import MemoryBudget, require_memory, resident_bytes
from sbert_pipeline.io.sizes import format_size

# Bytes per pair at the peak: the Arrow ids and scores read and mapped to rows, the row pairs,
# their sort order, and a threshold's subset with the sweep's adjacency.
BYTES_PER_PAIR = 160
# Bytes per row: the ids read (and their sort for the repeat check), Arrow's id -> row hash
# table while the pairs are mapped, about ten (n,) int64 arrays of the groupings and rankings.
BYTES_PER_ROW = 200
# The least the process holds with the interpreter, numpy, pyarrow and scipy loaded (measured:
# 423 MiB); a standalone ``sbert dedup`` has loaded only part of it when the check runs.
BASE_BYTES = 450 * 2**20
# Bytes per grouped row of a previous version in the output folder (``--stable-keep``): the
# members of its groups and of this run's as Python sets, to match stable group ids and count
# what changed (5M rows, 1.85M grouped: +0.69 GB, 373 bytes each), and its id lists.
BYTES_PER_PREVIOUS_GROUPED_ROW = 500


def dedup_memory(rows: int, pairs: int, held: int = 0, previous_grouped: int = 0) -> int:
    """Bytes a dedup run over ``rows`` items and ``pairs`` loaded pairs needs at its peak, in
    a process that holds ``held`` bytes when it starts (at least :data:`BASE_BYTES` count),
    with a previous version of ``previous_grouped`` grouped rows to compare with."""
    return (
        max(held, BASE_BYTES)
        + rows * BYTES_PER_ROW
        + pairs * BYTES_PER_PAIR
        + previous_grouped * BYTES_PER_PREVIOUS_GROUPED_ROW
    )


def previous_grouped_rows(output: str | None) -> int:
    """Grouped rows of the dedup version ``output`` holds (``groups.parquet``'s footer; 0
    when there is none or it cannot be read: then it is not compared either)."""
    if output is None:
        return 0
    path = join(output, GROUPS_FILE)
    try:
        return count_rows([path]) if FileSystems.exists(join(output, MANIFEST)) else 0
    except (OSError, pa.ArrowException):
        return 0


def pairs_to_load(pairs_output: PairsOutput, threshold: float) -> int:
    """How many pairs the run reads, from the manifest (the Parquet footers when it has no
    count): ``pairs/``, and the neighbour lists' entries when ``threshold`` lies below the
    pairs' threshold (they are read too, :func:`sbert_pipeline.dedup.load.load_pairs`)."""
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
    output: str | None = None,
) -> dict:
    """Refuse a run that would need more than ``budget``; else what it was estimated at.

    Rows come from the embeddings' Parquet footers, pairs from the pairs manifest: nothing
    else is read.

    Returns:
        ``{"budget", "rows", "pairs", "held_at_start_bytes", "previous_grouped_rows",
        "estimate_bytes"}`` for the manifest.

    Raises:
        sbert_pipeline.io.resources.ResourceError: over the budget (naming the size needed).
    """
    rows = sum(dataset.count for dataset in datasets)
    pairs = 0 if pairs_output is None else pairs_to_load(pairs_output, threshold)
    held = resident_bytes()
    previous = previous_grouped_rows(output)
    needed = dedup_memory(rows, pairs, held, previous)
    compared = (
        f", {BYTES_PER_PREVIOUS_GROUPED_ROW} a grouped row of the previous version ({previous:,})"
        if previous
        else ""
    )
    require_memory(
        needed,
        budget,
        f"dedup of {rows:,} rows and {pairs:,} pairs (about {BYTES_PER_ROW} bytes a row, "
        f"{BYTES_PER_PAIR} a pair{compared}, on top of the {format_size(max(held, BASE_BYTES))} "
        "the process holds with its libraries)",
        "raise --threshold / the pairs stage's threshold so that fewer pairs are loaded",
    )
    return {
        "budget": budget.to_json(),
        "rows": rows,
        "pairs": pairs,
        "held_at_start_bytes": held,
        "previous_grouped_rows": previous,
        "estimate_bytes": needed,
    }
