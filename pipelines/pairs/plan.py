"""The pairs stage's plan, fixed before any data is read: exact or clustered, the memory model
of a worker, and the clustered mode's blocking settings and sample rows.

Messages name the ``sbert pairs`` options (``--worker-memory``, ``--max-block``, ...), which are
this stage's parameter names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sbert_pipeline.io.sizes import format_size
from sbert_pipeline.pairs.defaults import DEFAULT_MAX_BLOCK, MIN_SAMPLE, SAMPLE_PER_CLUSTER
from sbert_pipeline.vectors.sampling import sample_rows, sample_size

# auto: exact search up to this many vectors. Exact work grows as n^2: 100k x 384 took 98 s
# here (two shared cores; clustered 72 s at recall 0.98), so 200k is about 6.5 minutes, and 1M
# would be hours, where the clustered mode's work grows about as n^1.5.
EXACT_MAX_ROWS = 200_000
# Block groups at least (when there are as many blocks): one Beam element each, so that
# several workers share the search.
MIN_GROUPS = 16
# Fixed memory of a worker besides the vectors: the similarity tile of 2^26 scores and its masks
# (about 1 GiB) and Python, Beam and torch themselves.
WORKER_OVERHEAD = 1536 * 1024**2
# Candidates a row of the whole-matrix search keeps beyond k, at least (allpairs._MIN_EXTRA).
CANDIDATE_EXTRA = 32
BYTES_PER_ID = 100  # an id string in Arrow plus its sort index, generously


@dataclass(frozen=True)
class Blocking:
    """The clustered mode's settings and sample rows, fixed before any data is read."""

    clusters: int
    nprobe: int | None  # None: chosen by the tuning queries
    max_block: int
    group_rows: int  # routed rows a worker holds at a time (one group of blocks)
    fit_rows: np.ndarray  # k-means sample
    tune_rows: np.ndarray  # queries that choose nprobe
    recall_rows: np.ndarray  # queries that measure the recall of the result

    def picks(self) -> dict[str, np.ndarray]:
        """The rows the launcher's scan collects."""
        return {"fit": self.fit_rows, "tune": self.tune_rows, "recall": self.recall_rows}


@dataclass(frozen=True)
class BlockingRequest:
    """The clustered-mode options as asked (None: the default)."""

    k: int
    clusters: int | None
    nprobe: int | None
    max_block: int | None
    sample: int | None
    tune_sample: int
    recall_sample: int
    seed: int
    worker_memory: str  # as written, for messages


def exact_worker_bytes(n: int, dim: int) -> int:
    """Memory one exact-mode worker needs: all vectors twice (while sorting), ids, overhead."""
    return 2 * n * dim * 4 + n * BYTES_PER_ID + WORKER_OVERHEAD


def whole_matrix_bytes(n: int, dim: int, k: int, threshold: bool) -> int:
    """Memory of the whole-matrix exact search (one worker, every row at once): the larger of
    loading (all vectors twice, while sorting) and searching (the float32 vectors, their bf16
    copy, every row's candidate list of ``k + max(32, k)`` scores and indices, the ``n x k``
    answer, and with a threshold the float64 copy the threshold search takes of the norms'
    input), plus the ids and the fixed overhead (the score tiles among it).

    The pairs found above a threshold (24 bytes each) come on top: their number is the data's.
    """
    vectors = n * dim * 4
    width = k + max(CANDIDATE_EXTRA, k)
    search = vectors + n * dim * 2 + n * width * 12 + n * k * 12
    if threshold:
        search += n * dim * 8
    return max(2 * vectors, search) + n * BYTES_PER_ID + WORKER_OVERHEAD


def exact_path(n: int, dim: int, k: int, threshold: bool, budget: int) -> str:
    """``whole`` (one symmetric search of every row, half the products of the ranges) when its
    memory fits ``budget``, else ``ranges`` (query ranges on many workers)."""
    return "whole" if whole_matrix_bytes(n, dim, k, threshold) <= budget else "ranges"


def block_worker_bytes(block: int, dim: int) -> int:
    """Memory one clustered-mode worker needs for ``block`` routed rows (one block group): the
    rows read, concatenated and sorted (three copies at most), their ids, and overhead."""
    return 3 * block * dim * 4 + block * BYTES_PER_ID + WORKER_OVERHEAD


def fit_sample_size(request: BlockingRequest, n: int, dim: int, clusters: int) -> int:
    """Rows of the k-means sample the clustered mode fits its centroids on."""
    return sample_size(
        n,
        dim,
        clusters,
        per_cluster=SAMPLE_PER_CLUSTER,
        minimum=MIN_SAMPLE,
        requested=request.sample,
    )


def clustered_launcher_bytes(request: BlockingRequest, n: int, dim: int) -> int:
    """Memory the clustered mode's launcher holds besides a worker: every id while the scan
    checks them, the k-means sample (and the fit's working copy of it), and the exact-truth
    queries with the vectors of their exact neighbours."""
    from sbert_pipeline.vectors.block_plan import default_clusters

    clusters = min(request.clusters or default_clusters(n, request.k), n)
    sample = fit_sample_size(request, n, dim, clusters)
    queries = min(request.recall_sample + request.tune_sample, n)
    return n * BYTES_PER_ID + 2 * sample * dim * 4 + queries * (request.k + 1) * dim * 4


def clustered_disk_bytes(n: int, id_bytes: int, dim: int, nprobe: int, k: int) -> int:
    """Temporary disk of the clustered search (``_work/``, see ``pipelines/pairs/transforms.py``),
    counted uncompressed: every vector once (``n * dim * 4``), ``nprobe`` row-list entries per
    vector (block, output shard, source, row and the id), and ``nprobe`` candidate lists per
    vector (the id, ``k`` neighbour ids and scores). ``id_bytes`` is the ids' total size.

    The pairs found above a threshold come on top (each pair once per block the two share):
    their number is the data's.
    """
    per_id = id_bytes / n if n else 0.0
    lists = nprobe * n * (20 + per_id)
    candidates = nprobe * n * (per_id + 12 + k * (per_id + 8))
    return int(n * dim * 4 + lists + candidates)


def choose_method(requested: str, n: int, dim: int, budget: int, worker_memory: str) -> str:
    """exact or clustered: as asked, or by size and memory for auto.

    Raises:
        ValueError: exact mode asked for and the vectors do not fit ``budget``.
    """
    needed = exact_worker_bytes(n, dim)
    if requested == "exact" and needed > budget:
        raise ValueError(
            f"exact mode keeps all {n} vectors in every worker: about {format_size(needed)}, "
            f"more than --worker-memory {worker_memory}; use --method clustered or a "
            "larger --worker-memory"
        )
    if requested != "auto":
        return requested
    return "exact" if n <= EXACT_MAX_ROWS and needed <= budget else "clustered"


def plan_blocking(request: BlockingRequest, n: int, dim: int, budget: int) -> Blocking:
    """Clustered-mode settings checked against N and the memory, and the sample rows.

    The recall queries are drawn first; the tuning queries come from the other rows when there
    are enough, so that the recall is measured on queries the choice of nprobe did not see.

    Raises:
        ValueError: a setting that cannot work for N vectors in ``budget``, naming the option.
    """
    k = request.k
    # imported here: block_plan loads torch; sbert pairs --help reads this module
    from sbert_pipeline.vectors.block_plan import default_clusters

    clusters = request.clusters or default_clusters(n, k)
    if clusters > n:
        raise ValueError(f"--clusters {clusters} is more than the {n} embeddings")
    if request.nprobe is not None and request.nprobe > clusters:
        raise ValueError(f"--nprobe {request.nprobe} is more than the {clusters} clusters")
    fits = (budget - WORKER_OVERHEAD) // (3 * dim * 4 + BYTES_PER_ID)
    if fits < k + 1:
        raise ValueError(
            f"--worker-memory {request.worker_memory} leaves no room for a block of vectors "
            f"(a worker needs about {format_size(WORKER_OVERHEAD)} besides them)"
        )
    max_block = request.max_block or min(DEFAULT_MAX_BLOCK, fits)
    if max_block > fits:
        raise ValueError(
            f"--max-block {max_block} needs about {format_size(block_worker_bytes(max_block, dim))}"
            f" per worker, more than --worker-memory {request.worker_memory}"
        )
    if max_block < k + 1:
        raise ValueError(f"--max-block {max_block} must exceed --k {k}")
    rng = np.random.default_rng([request.seed, 1])
    order = rng.permutation(n)
    recall_rows = order[: min(request.recall_sample, n)]
    tune_size = min(request.tune_sample if request.nprobe is None else 0, n)
    rest = order[len(recall_rows) :]
    tune_rows = rest[:tune_size] if len(rest) >= tune_size else order[:tune_size]
    fit_size = fit_sample_size(request, n, dim, clusters)
    return Blocking(
        clusters,
        request.nprobe,
        max_block,
        max(max_block, fits),
        sample_rows(n, fit_size, request.seed),
        np.sort(tune_rows),
        np.sort(recall_rows),
    )
