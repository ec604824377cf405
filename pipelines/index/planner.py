"""Choosing a FAISS index for N vectors of dimension d under a memory budget.

The rules follow the FAISS guidelines ("Guidelines to choose an index" in the FAISS wiki):

1. **Flat** when exact search is cheap: N·d <= 2^22 multiply-adds per query (about 11k
   vectors of 384 dimensions) costs well under a millisecond and needs no training or tuning.
2. **HNSW{M}** (M = 32, else 16) when the raw vectors plus the graph fit: the fastest CPU index
   at high recall, no training; N is capped because one machine builds the graph serially.
3. **IVF{nlist},Flat** when the raw vectors fit but the graph does not: nlist is about
   4·sqrt(N), a power of two, at most N/39 (k-means wants >= 39 points per centroid) and
   within [16, 65536].
4. **IVF{nlist},SQ8** when the raw vectors do not fit but one byte per dimension does: the
   FAISS guidelines' step between raw vectors and product quantization. Each component is
   quantised to 8 bits, so recall stays close to IVF,Flat's (a 5M x 384 OPQ192,IVF8192,PQ192
   index plateaued at recall@10 0.854 whatever nprobe; SQ8 at the same N fits 4GB too).
5. **OPQ{m},IVF{nlist},PQ{m}** beyond: vectors compressed to m bytes each; the largest m whose
   index fits the budget (more bytes, better recall), with m <= d/2.

Memory estimates (bytes, float32 vectors, 64-bit ids; what the index occupies when loaded):

- Flat:        4·N·d
- HNSW{M}:     N·(4·d + 4·(2·M + M/(M-1)) + 12)
  (level 0 keeps 2·M int32 neighbours, upper levels M each with an expected 1/(M-1) levels
  per vector; plus an int32 level and a 64-bit offset per vector)
- IVF,Flat:    N·(4·d + 8) + nlist·(4·d + 48)
  (codes and ids per vector; a centroid and two list headers per list)
- IVF,SQ8:     N·(d + 8) + nlist·(4·d + 48) + 2·4·d
  (one byte per component and the id; centroids and list headers; the quantiser's range)
- OPQ,IVF,PQ:  N·(m + 8) + nlist·(4·D + 48) + 4·256·D + 4·d·D [+ 4·nlist·m·256 for l2]
  (codes and ids; centroids and list headers; PQ codebooks; the OPQ rotation; for l2 FAISS
  keeps a precomputed distance table when it is under 2 GiB)

The budget bounds the whole process, not only the index: with a :class:`ProcessMemory` the
planner adds what the process holds besides the final index (:meth:`ProcessMemory.parts`): what
is already resident, the held-out queries, and the larger of the two phases of a build, the
training (the sample and FAISS's copies of it) and the fill (the index plus the reading batches).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Literal

from sbert_pipeline.io.resources import MemoryBudget, ResourceError, require_memory
from sbert_pipeline.io.sizes import format_size
from sbert_pipeline.vectors.memory_use import vector_bytes
from sbert_pipeline.vectors.records import field_record

Metric = Literal["ip", "l2"]
Family = Literal["flat", "hnsw", "ivf_flat", "ivf_sq", "ivf_pq"]

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
# Training vectors: 64 per IVF list (FAISS wants 39-256; k-means subsamples above 256), at least
# 64 per PQ centroid, at most this many above the 39-per-list minimum (memory).
TRAIN_POINTS_PER_LIST = 64
MAX_TRAIN_VECTORS = 500_000
# Copies of the training sample alive while an index trains: ours, plus for OPQ+IVF-PQ the
# rotated copy (IndexPreTransform.train) and the IVF residuals the PQ is trained on; for SQ8
# the residuals its range is trained on.
TRAIN_COPIES: dict[str, int] = {"flat": 0, "hnsw": 0, "ivf_flat": 1, "ivf_sq": 2, "ivf_pq": 3}
# Copies of one reading batch alive while it is added: the Arrow batch, its numpy matrix, the
# normalised copy, and the OPQ-rotated copy inside FAISS.
BATCH_COPIES = 4
# What the Parquet reader holds besides the batch (pages, decoding buffers, the allocator's
# working set): measured 70-93 MiB reading 384-d vectors in batches of 4k-16k rows.
READER_BYTES = 96 * 2**20
# The held-out queries: the build's copy and the exact top-k's.
QUERY_COPIES = 2


class BudgetTooSmallError(ResourceError, ValueError):
    """No index family fits the memory budget (a :class:`ResourceError`, and a ValueError for
    the callers that refuse bad input with one)."""


@dataclass(frozen=True)
class MemoryEstimate:
    """One candidate index and what it needs in memory.

    Attributes:
        factory: the FAISS ``index_factory`` string.
        family: which rule produced it.
        bytes: estimated memory of the filled index.
        formula: the estimate with the numbers substituted, for the manifest and messages.
        search_parameter: what ``ParameterSpace`` tunes at search time (None: exact).
        train_vectors: the default training sample (0: the index needs no training).
    """

    factory: str
    family: Family
    bytes: int
    formula: str
    search_parameter: str | None
    train_vectors: int = 0


@dataclass(frozen=True)
class ProcessMemory:
    """What the process holds besides the final index while it builds one.

    Attributes:
        resident: bytes resident when the stage starts (interpreter, libraries, earlier stages).
        batch_rows: vectors read and added per step (``--batch-size``).
        query_rows: held-out query vectors.
        train_sample: ``--train-sample`` (None: each index's default).
    """

    resident: int = 0
    batch_rows: int = 0
    query_rows: int = 0
    train_sample: int | None = None

    def parts(self, candidate: MemoryEstimate, n: int, dim: int) -> dict[str, int]:
        """Bytes of each part for building ``candidate`` over ``n`` vectors; ``"total"`` is
        the peak: resident + queries + the larger of training and filling."""
        n_train = candidate.train_vectors
        if n_train and self.train_sample is not None:
            n_train = min(n, self.train_sample)
        parts = {
            "resident": self.resident,
            "held_out_queries": QUERY_COPIES * vector_bytes(self.query_rows, dim),
            "training": TRAIN_COPIES[candidate.family] * vector_bytes(n_train, dim),
            "index": candidate.bytes,
            "reading_batches": READER_BYTES
            + BATCH_COPIES * vector_bytes(min(self.batch_rows, n), dim),
        }
        fill = parts["index"] + parts["reading_batches"]
        parts["total"] = (
            parts["resident"] + parts["held_out_queries"] + max(parts["training"], fill)
        )
        return parts

    def describe(self, parts: dict[str, int]) -> str:
        """The parts in words, for messages."""
        return ", ".join(
            f"{name.replace('_', ' ')} {format_size(size)}"
            for name, size in parts.items()
            if name != "total"
        )


@dataclass(frozen=True)
class IndexPlan:
    """The chosen index and every candidate that was weighed, in order of preference."""

    n: int
    dim: int
    metric: Metric
    budget_bytes: int
    chosen: MemoryEstimate
    considered: tuple[MemoryEstimate, ...]
    process: ProcessMemory | None = None

    def needed(self, candidate: MemoryEstimate) -> int:
        """Peak bytes of the process building ``candidate`` (the index alone without a
        :class:`ProcessMemory`)."""
        if self.process is None:
            return candidate.bytes
        return self.process.parts(candidate, self.n, self.dim)["total"]

    def fits(self, candidate: MemoryEstimate) -> bool:
        """Whether building ``candidate`` stays within the budget."""
        return self.needed(candidate) <= self.budget_bytes

    def to_json(self) -> dict:
        """A JSON-ready record for the index manifest."""
        process = self.process
        return field_record(
            self,
            chosen=asdict(self.chosen),
            considered=[
                {**asdict(c), "process_bytes": self.needed(c), "fits": self.fits(c)}
                for c in self.considered
            ],
            process=None
            if process is None
            else {**asdict(process), "parts": process.parts(self.chosen, self.n, self.dim)},
        )


def train_sample_size(n: int, nlist: int, min_points: int) -> int:
    """Training vectors for an index of ``nlist`` inverted lists (1 without IVF) over N vectors
    that needs at least ``min_points`` to train (nlist, or 256 for PQ codebooks): 64 per list
    and per needed point, at most 500k above the 39-per-list minimum, at most N."""
    wanted = max(TRAIN_POINTS_PER_LIST * nlist, TRAIN_POINTS_PER_LIST * min_points)
    return min(n, max(POINTS_PER_CENTROID * nlist, min(wanted, MAX_TRAIN_VECTORS)))


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
        train_sample_size(n, nlist, nlist),
    )


def ivf_sq8_estimate(n: int, dim: int, nlist: int) -> MemoryEstimate:
    """IVF with every component of the (residual) vectors quantised to one byte."""
    return MemoryEstimate(
        f"IVF{nlist},SQ8",
        "ivf_sq",
        n * (dim + 8) + nlist * (4 * dim + LIST_HEADER_BYTES) + 2 * 4 * dim,
        f"N·(d + 8) + nlist·(4·d + 48) + 2·4·d = {n}·({dim} + 8) + {nlist}·(4·{dim} + 48) + "
        f"8·{dim}",
        "nprobe",
        train_sample_size(n, nlist, nlist),
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
    return MemoryEstimate(
        f"{opq},IVF{nlist},PQ{m}",
        "ivf_pq",
        total,
        formula,
        "nprobe",
        train_sample_size(n, nlist, max(nlist, PQ_CENTROIDS)),
    )


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
        out.append(ivf_sq8_estimate(n, dim, nlist))
    if n >= POINTS_PER_CENTROID * PQ_CENTROIDS:
        pq_bytes = [m for m in PQ_BYTES_CHOICES if 2 * m <= dim]
        out.extend(ivf_pq_estimate(n, dim, nlist, m, metric) for m in reversed(pq_bytes))
    return out


def plan_index(
    n: int,
    dim: int,
    metric: Metric,
    budget: int | MemoryBudget,
    process: ProcessMemory | None = None,
) -> IndexPlan:
    """Pick the best index for N x d vectors that fits the budget.

    With ``process``, the whole process's peak must fit (see :class:`ProcessMemory`); without,
    the index alone.

    Example:
        >>> plan_index(1_000_000, 384, "ip", parse_size("2GB")).chosen.factory
        'HNSW32'
        >>> plan_index(1_000_000, 384, "ip", parse_size("1.6GB")).chosen.factory
        'IVF4096,Flat'
        >>> plan_index(1_000_000, 384, "ip", parse_size("100MB")).chosen.factory
        'OPQ64,IVF4096,PQ64'

    Raises:
        ValueError: N or d not positive, unknown metric.
        BudgetTooSmallError: nothing fits; the message names the smallest candidate's need
            and the budget.
    """
    if not isinstance(budget, MemoryBudget):
        budget = MemoryBudget(budget, "--memory-budget")
    if n <= 0 or dim <= 0:
        raise ValueError(f"cannot plan an index for {n} vectors of dimension {dim}")
    if metric not in ("ip", "l2"):
        raise ValueError(f"metric must be 'ip' or 'l2', got {metric!r}")
    considered = candidates(n, dim, metric)
    if not considered:  # tiny N with a large d: only Flat makes sense
        considered = [flat_estimate(n, dim)]
    plans = [
        IndexPlan(n, dim, metric, budget.bytes, candidate, tuple(considered), process)
        for candidate in considered
    ]
    smallest = min(plans, key=lambda plan: plan.needed(plan.chosen))
    chosen = smallest.chosen
    held = f"the index alone is {chosen.formula}"
    if process is not None:
        held += f"; the process holds {process.describe(process.parts(chosen, n, dim))}"
    try:  # refuses when even the smallest does not fit
        require_memory(
            smallest.needed(chosen),
            budget,
            f"no FAISS index for {n:,} vectors of dimension {dim} fits: the smallest, "
            f"{chosen.factory},",
            f"index fewer vectors ({held})",
        )
    except ResourceError as err:
        raise BudgetTooSmallError(str(err)) from None
    return next(plan for plan in plans if plan.fits(plan.chosen))


def estimate_for_factory(factory: str, n: int, dim: int, metric: Metric) -> MemoryEstimate | None:
    """The estimate for a factory string of one of our five families, else None."""
    if factory == "Flat":
        return flat_estimate(n, dim)
    if match := re.fullmatch(r"HNSW(\d+)(,Flat)?", factory):
        return hnsw_estimate(n, dim, int(match.group(1)))
    if match := re.fullmatch(r"IVF(\d+),Flat", factory):
        return ivf_flat_estimate(n, dim, int(match.group(1)))
    if match := re.fullmatch(r"IVF(\d+),SQ8", factory):
        return ivf_sq8_estimate(n, dim, int(match.group(1)))
    if match := re.fullmatch(r"OPQ(\d+)(?:_(\d+))?,IVF(\d+),PQ(\d+)", factory):
        m, reduced, nlist, pq = (int(g) if g else None for g in match.groups())
        if m == pq:
            estimate = ivf_pq_estimate(n, dim, nlist, m, metric, reduced)
            return replace(estimate, factory=factory)
    return None
