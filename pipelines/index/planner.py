"""Choosing a FAISS index for N vectors of dimension d under a memory budget.

The rules follow the FAISS guidelines ("Guidelines to choose an index" in the FAISS wiki):

1. **Flat** when exact search is cheap: N·d <= 2^22 multiply-adds per query (about 11k
   vectors of 384 dimensions) costs well under a millisecond and needs no training or tuning.
2. **HNSW{M}** (M = 32, else 16) when the raw vectors plus the graph fit: the fastest CPU index
   at high recall, no training; N is capped because one machine builds the graph serially.
3. **IVF{nlist},Flat** when the raw vectors fit but the graph does not: nlist is about
   4·sqrt(N), a power of two, at most N/39 (k-means wants >= 39 points per centroid) and
   within [16, 65536].
4. **OPQ{m},IVF{nlist},PQ{m}** beyond: vectors compressed to m bytes each; the largest m whose
   index fits the budget (more bytes, better recall), with m <= d/2.

Memory estimates (bytes, float32 vectors, 64-bit ids; what the index occupies when loaded):

- Flat:        4·N·d
- HNSW{M}:     N·(4·d + 4·(2·M + M/(M-1)) + 12)
  (level 0 keeps 2·M int32 neighbours, upper levels M each with an expected 1/(M-1) levels
  per vector; plus an int32 level and a 64-bit offset per vector)
- IVF,Flat:    N·(4·d + 8) + nlist·(4·d + 48)
  (codes and ids per vector; a centroid and two list headers per list)
- OPQ,IVF,PQ:  N·(m + 8) + nlist·(4·D + 48) + 4·256·D + 4·d·D [+ 4·nlist·m·256 for l2]
  (codes and ids; centroids and list headers; PQ codebooks; the OPQ rotation; for l2 FAISS
  keeps a precomputed distance table when it is under 2 GiB)
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Literal

from pipelines.io.sizes import format_size
from pipelines.vectors.records import field_record

Metric = Literal["ip", "l2"]
Family = Literal["flat", "hnsw", "ivf_flat", "ivf_pq"]

# Exact search below this many multiply-adds per query is faster than tuning anything.
FLAT_MAX_WORK = 2**22
# One machine inserts into an HNSW graph serially-ish; beyond ~10M vectors building takes
# hours and the graph cannot be built shard by shard and merged, so IVF takes over.
HNSW_MAX_N = 10_000_000
HNSW_M_CHOICES = (32, 16)
# k-means (IVF centroids, PQ codebooks) wants at least this many training points per centroid.
POINTS_PER_CENTROID = 39
MIN_NLIST, MAX_NLIST = 16, 65536
PQ_CENTROIDS = 256  # 8-bit codes
PQ_BYTES_CHOICES = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
PRECOMPUTED_TABLE_MAX_BYTES = 2**31  # faiss IndexIVFPQ.precomputed_table_max_bytes
LIST_HEADER_BYTES = 48  # two std::vector headers (codes, ids) per inverted list


class BudgetTooSmallError(ValueError):
    """No index family fits the memory budget."""


@dataclass(frozen=True)
class MemoryEstimate:
    """One candidate index and what it needs in memory.

    Attributes:
        factory: the FAISS ``index_factory`` string.
        family: which rule produced it.
        bytes: estimated memory of the filled index.
        formula: the estimate with the numbers substituted, for the manifest and messages.
        search_parameter: what ``ParameterSpace`` tunes at search time (None: exact).
    """

    factory: str
    family: Family
    bytes: int
    formula: str
    search_parameter: str | None


@dataclass(frozen=True)
class IndexPlan:
    """The chosen index and every candidate that was weighed, in order of preference."""

    n: int
    dim: int
    metric: Metric
    budget_bytes: int
    chosen: MemoryEstimate
    considered: tuple[MemoryEstimate, ...]

    def to_json(self) -> dict:
        """A JSON-ready record for the index manifest."""
        return field_record(
            self,
            chosen=asdict(self.chosen),
            considered=[
                {**asdict(c), "fits": c.bytes <= self.budget_bytes} for c in self.considered
            ],
        )


def ivf_nlist(n: int) -> int:
    """Inverted lists for N vectors: the power of two nearest 4·sqrt(N), clamped.

    At most N/39 so that k-means has its 39 points per centroid, and within [16, 65536].
    """
    target = 4 * math.sqrt(max(n, 1))
    nlist = 2 ** round(math.log2(target))
    most = 2 ** math.floor(math.log2(max(n // POINTS_PER_CENTROID, 1)))
    return max(MIN_NLIST, min(nlist, most, MAX_NLIST))


def flat_estimate(n: int, dim: int) -> MemoryEstimate:
    """Exact search over the raw vectors."""
    return MemoryEstimate("Flat", "flat", 4 * n * dim, f"4·N·d = 4·{n}·{dim}", None)


def hnsw_estimate(n: int, dim: int, m: int) -> MemoryEstimate:
    """HNSW over the raw vectors with M links per node."""
    links = 2 * m + m / (m - 1)
    per_vector = 4 * dim + 4 * links + 12
    return MemoryEstimate(
        f"HNSW{m}",
        "hnsw",
        math.ceil(n * per_vector),
        f"N·(4·d + 4·(2·M + M/(M-1)) + 12) = {n}·(4·{dim} + 4·{links:.2f} + 12)",
        "efSearch",
    )


def ivf_flat_estimate(n: int, dim: int, nlist: int) -> MemoryEstimate:
    """IVF with raw vectors in the lists."""
    return MemoryEstimate(
        f"IVF{nlist},Flat",
        "ivf_flat",
        n * (4 * dim + 8) + nlist * (4 * dim + LIST_HEADER_BYTES),
        f"N·(4·d + 8) + nlist·(4·d + 48) = {n}·(4·{dim} + 8) + {nlist}·(4·{dim} + 48)",
        "nprobe",
    )


def ivf_pq_estimate(
    n: int, dim: int, nlist: int, m: int, metric: Metric, reduced: int | None = None
) -> MemoryEstimate:
    """OPQ-rotated IVF-PQ with m-byte codes.

    ``reduced`` is the dimension OPQ rotates into (D); by default d, or the largest multiple
    of m below d when m does not divide d.
    """
    reduced = reduced or m * (dim // m)
    opq = f"OPQ{m}" if reduced == dim else f"OPQ{m}_{reduced}"
    table = 4 * nlist * m * PQ_CENTROIDS
    # FAISS only precomputes the residual distance table for l2, and only while it is small.
    table = table if metric == "l2" and table <= PRECOMPUTED_TABLE_MAX_BYTES else 0
    total = (
        n * (m + 8)
        + nlist * (4 * reduced + LIST_HEADER_BYTES)
        + 4 * PQ_CENTROIDS * reduced
        + 4 * dim * reduced
        + table
    )
    formula = (
        f"N·(m + 8) + nlist·(4·D + 48) + 4·256·D + 4·d·D + table = {n}·({m} + 8) + "
        f"{nlist}·(4·{reduced} + 48) + 4·256·{reduced} + 4·{dim}·{reduced} + {table}"
    )
    return MemoryEstimate(f"{opq},IVF{nlist},PQ{m}", "ivf_pq", total, formula, "nprobe")


def candidates(n: int, dim: int, metric: Metric) -> list[MemoryEstimate]:
    """Every index the rules allow for this size, best first (budget not yet applied)."""
    out: list[MemoryEstimate] = []
    if n * dim <= FLAT_MAX_WORK:
        out.append(flat_estimate(n, dim))
    if n <= HNSW_MAX_N:
        out.extend(hnsw_estimate(n, dim, m) for m in HNSW_M_CHOICES)
    nlist = ivf_nlist(n)
    if n >= POINTS_PER_CENTROID * MIN_NLIST:
        out.append(ivf_flat_estimate(n, dim, nlist))
    if n >= POINTS_PER_CENTROID * PQ_CENTROIDS:
        pq_bytes = [m for m in PQ_BYTES_CHOICES if 2 * m <= dim]
        out.extend(ivf_pq_estimate(n, dim, nlist, m, metric) for m in reversed(pq_bytes))
    return out


def plan_index(n: int, dim: int, metric: Metric, budget_bytes: int) -> IndexPlan:
    """Pick the best index for N x d vectors that fits ``budget_bytes``.

    Example:
        >>> plan_index(1_000_000, 384, "ip", parse_size("2GB")).chosen.factory
        'HNSW32'
        >>> plan_index(1_000_000, 384, "ip", parse_size("1.6GB")).chosen.factory
        'IVF4096,Flat'
        >>> plan_index(1_000_000, 384, "ip", parse_size("100MB")).chosen.factory
        'OPQ64,IVF4096,PQ64'

    Raises:
        ValueError: N or d not positive, unknown metric.
        BudgetTooSmallError: nothing fits; the message names the smallest candidate's need.
    """
    if n <= 0 or dim <= 0:
        raise ValueError(f"cannot plan an index for {n} vectors of dimension {dim}")
    if metric not in ("ip", "l2"):
        raise ValueError(f"metric must be 'ip' or 'l2', got {metric!r}")
    considered = candidates(n, dim, metric)
    if not considered:  # tiny N with a large d: only Flat makes sense
        considered = [flat_estimate(n, dim)]
    for candidate in considered:
        if candidate.bytes <= budget_bytes:
            return IndexPlan(n, dim, metric, budget_bytes, candidate, tuple(considered))
    smallest = min(considered, key=lambda c: c.bytes)
    raise BudgetTooSmallError(
        f"no FAISS index for {n:,} vectors of dimension {dim} fits a memory budget of "
        f"{format_size(budget_bytes)}: the smallest, {smallest.factory}, needs "
        f"{format_size(smallest.bytes)} ({smallest.formula}); raise --memory-budget to at "
        f"least {format_size(smallest.bytes)}"
    )


def estimate_for_factory(factory: str, n: int, dim: int, metric: Metric) -> MemoryEstimate | None:
    """The estimate for a factory string of one of our four families, else None."""
    if factory == "Flat":
        return flat_estimate(n, dim)
    if match := re.fullmatch(r"HNSW(\d+)(,Flat)?", factory):
        return hnsw_estimate(n, dim, int(match.group(1)))
    if match := re.fullmatch(r"IVF(\d+),Flat", factory):
        return ivf_flat_estimate(n, dim, int(match.group(1)))
    if match := re.fullmatch(r"OPQ(\d+)(?:_(\d+))?,IVF(\d+),PQ(\d+)", factory):
        m, reduced, nlist, pq = (int(g) if g else None for g in match.groups())
        if m == pq:
            estimate = ivf_pq_estimate(n, dim, nlist, m, metric, reduced)
            return MemoryEstimate(
                factory, "ivf_pq", estimate.bytes, estimate.formula, estimate.search_parameter
            )
    return None
