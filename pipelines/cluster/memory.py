"""What the cluster stage holds in memory, counted before any vector is read (Beam-free).

The stage refuses before reading when this exceeds ``--memory-budget``
(``sbert_pipeline.io.resources.require_memory``) and records the parts in its manifest.

kmeans: the sample (read once into one array, and the fit's normalised copy), the centroids
(with the float64 sums of a Lloyd pass), one assignment batch (the Arrow batch, its matrix and
the normalised copy, plus a block of scores against every centroid), and the per-row results
the summaries read (id, label, score of every row). communities: every vector (the loaded
matrix, its normalised copy and the search's own), the neighbour lists and one similarity tile.
"""

from __future__ import annotations

from sbert_pipeline.io.resources import MemoryBudget, require_memory
from sbert_pipeline.io.sizes import format_size
from sbert_pipeline.vectors.memory_use import FLOAT32_BYTES, vector_bytes

# Rows assigned (and read) at a time by the Beam assignment and the refine passes.
ASSIGN_BATCH_ROWS = 65536
# Vectors per block of the assignment's score matrix (sbert_pipeline.vectors.kmeans.assign).
SCORE_BLOCK_ROWS = 8192
# Per-row results held for the summaries: an id (Arrow and Python string, about 40 characters),
# an int64 label and a float32 score, in the assignments table and in the arrays made from it.
RESULT_ROW_BYTES = 2 * (64 + 8 + 4)
# Copies: the sample (read, normalised for the fit); a batch (Arrow, matrix, normalised);
# all vectors for communities (loaded, normalised by the stage, normalised by the search).
SAMPLE_COPIES = 2
BATCH_COPIES = 3
COMMUNITY_COPIES = 3
# Centroids: float32 rows, the float64 sums of a Lloyd pass, and the normalised update.
CENTROID_BYTES_PER_VALUE = 4 + 8 + 4
# One similarity tile of the communities' exact top-k (sbert_pipeline.vectors.topk: 2^26 scores).
SIMILARITY_TILE_BYTES = FLOAT32_BYTES * 2**26
# Neighbour lists: an int64 row and a float32 score per neighbour.
NEIGHBOR_BYTES = 8 + 4


def kmeans_parts(resident: int, items: int, dim: int, k: int, sample: int) -> dict[str, int]:
    """Bytes of each part of a k-means run; ``"total"`` is their sum."""
    parts = {
        "resident": resident,
        "sample": SAMPLE_COPIES * vector_bytes(sample, dim),
        "centroids": CENTROID_BYTES_PER_VALUE * k * dim,
        "assignment_batch": BATCH_COPIES * vector_bytes(min(ASSIGN_BATCH_ROWS, items), dim)
        + FLOAT32_BYTES * min(SCORE_BLOCK_ROWS, items) * k,
        "per_row_results": RESULT_ROW_BYTES * items,
    }
    parts["total"] = sum(parts.values())
    return parts


def communities_parts(resident: int, items: int, dim: int, neighbors: int) -> dict[str, int]:
    """Bytes of each part of a communities run; ``"total"`` is their sum."""
    parts = {
        "resident": resident,
        "vectors": COMMUNITY_COPIES * vector_bytes(items, dim),
        "neighbor_lists": NEIGHBOR_BYTES * items * min(items, neighbors),
        "similarity_tile": min(SIMILARITY_TILE_BYTES, FLOAT32_BYTES * items * items),
        "per_row_results": RESULT_ROW_BYTES * items,
    }
    parts["total"] = sum(parts.values())
    return parts


def require_parts(parts: dict[str, int], budget: MemoryBudget, what: str, change: str) -> None:
    """Refuse when ``parts["total"]`` exceeds the budget, naming every part."""
    listed = ", ".join(
        f"{name.replace('_', ' ')} {format_size(size)}"
        for name, size in parts.items()
        if name != "total"
    )
    require_memory(parts["total"], budget, f"{what} ({listed})", change)
