"""Exact all-pairs nearest neighbours of one set of vectors with itself (Beam-free).

:func:`self_topk` gives every row its ``k`` most similar other rows (inner product, i.e. cosine
for L2-normalised rows), exactly in float32, with ties broken by the smaller index.
Pairs above a threshold, from such lists or exactly, are in
:mod:`sbert_pipeline.vectors.pairs_above`.

How :func:`self_topk` is fast and still exact:

1. **Candidate pass over the upper triangle.** The rows are cut into blocks; each pair of blocks
   ``I <= J`` is multiplied once, ``S = X_I X_J^T``, and ``S`` serves the rows of ``I`` and
   (read by columns) the rows of ``J``, which halves the matrix products. On CPUs with native
   bfloat16 the products run in bf16 (2-2.6x the fp32 throughput on AVX512-BF16). Each row keeps
   a running list of its ``w = k + extra`` best candidate scores, started from its own block
   (the diagonal tile). Each worker thread takes the next tile, multiplies it (single-threaded:
   independent products keep every core busy) and scans it at once, while it is still in cache,
   with a compiled kernel (:mod:`sbert_pipeline.vectors.tile_scan`) that reads each score once, for
   its row and its column, and inserts the few above a row's admission threshold.
2. **Proof.** Let ``delta`` bound the difference between a candidate score and the final score
   of the same pair (see :func:`candidate_error_bound`). Each row's k-th best candidate score is
   ``c_k``; a row admits a score only above its ``w``-th best ``c_w`` and at least
   ``c_k - 2 delta``, so any pair left out of its list scored at most ``c_w`` or less than
   ``c_k - 2 delta`` in the candidate pass. When ``c_w < c_k - 2 delta``, everything left out
   has a final score ``< c_k - delta``, below each of the ``k`` best listed pairs, so the exact
   top-k (ties at the k-th place included) lies in the list. (Admitting ties at
   ``c_k - 2 delta`` matters when ``delta`` is 0, as for zero rows.)
3. **Final scores.** The listed pairs within ``2 delta`` of ``c_k`` are scored again from the
   float32 vectors with float64 accumulation, rounded to float32 (one function for every pair,
   :mod:`sbert_pipeline.vectors.exact_scores`, so a pair's score does not depend on where or how it
   was found, and exact duplicates tie exactly), and the top ``k`` are taken by score, then index.
4. **Fallback.** Rows whose list does not satisfy the proof (more than ``extra`` candidates
   within ``2 delta`` of the k-th) are searched again against every row with fp32 products, whose
   bound is tiny; all pairs within its margin are rescored as in step 3. The number of such rows is
   reported in :class:`SelfTopkStats`.

Memory is bounded by ``block_size``: one ``block_size x block_size`` score tile per thread and
the running lists (``m x w``), never an ``n x n`` matrix.

Example:
    >>> indices, scores = self_topk(vectors, k=10)  # each row's 10 nearest other rows
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from sbert_pipeline.vectors.exact_scores import pair_scores_into, rescored_topk
from sbert_pipeline.vectors.precision import Precision, one_thread, use_bf16
from sbert_pipeline.vectors.progress import stage_progress
from sbert_pipeline.vectors.tile_scan import scan_tile, start_lists
from sbert_pipeline.vectors.tile_topk import tile_topk

# Rows per block when block_size is not given: a row's list starts from the top scores of its
# 4,096-row block (a 32 MB bf16 diagonal tile), which makes later insertions rare.
DEFAULT_BLOCK_SIZE = 4096
# Columns per off-diagonal tile: a 4,096 x 1,024 bf16 tile (8 MB) is still in cache when it is
# scanned right after its product, and the product itself ran 13% faster than 4,096 x 4,096.
_COLUMN_TILE = 1024
# Scores per step of the dense fp32 search, at least (16 MB).
_DENSE_SCORES = 1 << 22
# Extra candidates kept per row beyond k: the proof fails (and the row is searched again) only
# where more than this many candidates lie within the error margin of the k-th best. On MiniLM
# sentence embeddings (376k rows, k = 10) that happens for 0.15% of rows with 32, 6% with 16.
_MIN_EXTRA = 32

_BF16_ROUNDOFF = 2.0**-8  # unit roundoff u of bfloat16 (8 significant bits, round to nearest)
_FP32_ROUNDOFF = 2.0**-24
_FP64_ROUNDOFF = 2.0**-53
# Vectors larger than this could overflow float32 inner products.
_MAX_NORM = 1e18


@dataclass
class SelfTopkStats:
    """What :func:`self_topk` calls did (accumulated over calls), for benchmarks and logs."""

    rows: int = 0  # query rows answered
    precision: str = "float32"  # dtype of the candidate pass
    candidate_width: int = 0  # candidates kept per row (w)
    rescored_pairs: int = 0  # pairs scored again in float32/float64
    fallback_rows: int = 0  # rows searched again in fp32 because their list was unproven

    def count_call(self, rows: int, bf16: bool, width: int) -> None:
        """Add one call's query rows and record how its candidate pass ran."""
        self.rows += rows
        self.precision = "bfloat16" if bf16 else "float32"
        self.candidate_width = width


def candidate_error_bound(dim: int, bf16: bool) -> float:
    """``c`` with ``|candidate score - final score| <= c |x| |y|`` for every pair ``x, y``.

    The final score is the float64 sum of the ``dim`` exact float32 products, rounded to
    float32: within ``(u32 + dim u64) |x||y|`` of the exact inner product ``x.y``. The candidate
    score, with ``u`` the unit roundoff of its inputs' format and ``g = dim u32 / (1 - dim u32)``
    for float32 accumulation in any order (Higham, Accuracy and Stability, 3.1):

    - float32 products: ``|c - x.y| <= g |x||y|``.
    - bfloat16 products (inputs rounded to bf16, products accumulated in float32, result rounded
      to bf16, as oneDNN's bf16 GEMM does): rounding the inputs moves each term
      ``x_i y_i`` by at most ``(2u + u^2) |x_i y_i|``, and ``sum |x_i y_i| <= |x||y|``
      (Cauchy-Schwarz); accumulating adds ``g (1 + u)^2 |x||y|``; rounding the result to bf16
      adds ``u`` times its magnitude, at most ``u (1 + u)^2 (1 + g) |x||y|``.

    The sum is rounded up by 1% so that equality in the proof can never hold.
    """
    gamma = dim * _FP32_ROUNDOFF / (1 - dim * _FP32_ROUNDOFF)
    final = _FP32_ROUNDOFF + dim * _FP64_ROUNDOFF
    if bf16:
        u = _BF16_ROUNDOFF
        candidate = (2 * u + u * u) + gamma * (1 + u) ** 2 + u * (1 + u) ** 2 * (1 + gamma)
    else:
        candidate = gamma
    return 1.01 * (candidate + final)


def self_topk(
    vectors: np.ndarray,
    k: int,
    *,
    rows: tuple[int, int] | None = None,
    block_size: int | None = None,
    precision: Precision = "auto",
    stats: SelfTopkStats | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows of ``vectors`` with the largest inner product with each row, itself excluded.

    Exact in float32 whatever ``precision``: a score is the inner product of the float32
    vectors accumulated in float64 and rounded to float32, and of rows tied on a score the
    smaller index comes first, also at the k-th place (an exact duplicate with a larger index is
    left out). See the module docstring for the method.

    Args:
        vectors: ``(n, d)`` float32, finite; L2-normalised rows make the scores cosines.
        k: neighbours per row, ``1 <= k <= n - 1``.
        rows: answer only the query rows ``[start, stop)`` (against all ``n`` rows), so that
            the work can be split between workers; ``None`` answers every row.
        block_size: rows per block; one ``block_size^2`` score tile per thread is in memory
            at a time (default :data:`DEFAULT_BLOCK_SIZE`).
        precision: dtype of the candidate pass: ``float32``, ``bfloat16`` or ``auto``
            (bfloat16 where the CPU multiplies it natively). Only the speed depends on it.
        stats: if given, counts of what the call did are added to it.

    Returns:
        ``indices`` ``(m, k)`` int64 and ``scores`` ``(m, k)`` float32 for the ``m`` query rows,
        each row sorted by score descending, then index ascending.

    Raises:
        ValueError: ``vectors`` not a finite 2-d array of at least 2 rows, ``k``, ``rows`` or
            ``block_size`` out of range, or an unknown ``precision``.

    Example:
        >>> indices, scores = self_topk(vectors, 10, rows=(0, 50_000))  # the first half's lists
    """
    vectors = checked_vectors(vectors)
    n, dim = vectors.shape
    start, stop, block = _checked_query(n, k, rows, block_size)
    bf16 = use_bf16(precision)
    width = min(n - 1, k + max(_MIN_EXTRA, k))
    if stats is not None:
        stats.count_call(stop - start, bf16, width)
    with exact_fp32_matmul(), torch.inference_mode():
        data = torch.from_numpy(vectors)
        # An upper bound on the norms: fp32 rounding is far inside the bound's 1% slack.
        norms = torch.linalg.vector_norm(data, dim=1) * (1 + 1e-5)
        max_norm = float(norms.max())
        if stop == start:
            return np.empty((0, k), np.int64), np.empty((0, k), np.float32)
        query_rows = torch.arange(start, stop)
        if width == n - 1:
            # The lists would hold every other row anyway: search densely in fp32.
            return _exact_rows(data, query_rows, k, norms, max_norm, block, stats)
        lists = _CandidateLists(
            stop - start, k, width, norms[start:stop], max_norm, candidate_error_bound(dim, bf16)
        )
        candidates = data.to(torch.bfloat16) if bf16 else data
        plan = _tile_plan(n, start, stop, block, min(block, _COLUMN_TILE))
        workers = max(1, min(torch.get_num_threads(), len(plan)))
        _candidate_pass(candidates, lists, plan, start, workers)
        proven = lists.proven()
        indices, scores = _final_topk(data, lists, proven, start, k, stats)
        unproven = np.flatnonzero(~proven)
        if len(unproven):
            if stats is not None:
                stats.fallback_rows += len(unproven)
            again_ids, again_scores = _exact_rows(
                data, torch.from_numpy(unproven + start), k, norms, max_norm, block, stats
            )
            indices[unproven] = again_ids
            scores[unproven] = again_scores
    return indices, scores


def _checked_query(
    n: int, k: int, rows: tuple[int, int] | None, block_size: int | None
) -> tuple[int, int, int]:
    """``(start, stop, block)`` of a :func:`self_topk` call, checked against ``n`` rows."""
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must be between 1 and {n - 1} (the other rows), got {k}")
    start, stop = query_row_range(rows, n)
    block = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    if block < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return start, stop, block


@dataclass(frozen=True)
class _Tile:
    """One product of the candidate pass: score rows ``rows`` against columns ``columns``.

    ``row_block`` is the query block of the rows; ``column_block`` the query block of the
    columns when the tile serves them too (their lists take the scores read by columns), else
    ``None``. A diagonal tile (rows == columns) starts its rows' lists.
    """

    rows: tuple[int, int]
    columns: tuple[int, int]
    row_block: int
    column_block: int | None

    @property
    def diagonal(self) -> bool:
        return self.rows == self.columns


def _tile_plan(n: int, start: int, stop: int, block: int, column_tile: int) -> list[_Tile]:
    """The tiles of the candidate pass, in the order they are handed out.

    Query blocks (inside ``[start, stop)``) pair with themselves and each later query block once
    (both sides served); rows outside the query range are columns only. The diagonal tiles come
    first so that every row has a full candidate list, hence a useful threshold, early on.
    Off-diagonal products are cut into ``column_tile`` columns: a smaller score tile stays in
    cache between the product that writes it and the scan that reads it.
    """
    queries = [(i, min(i + block, stop)) for i in range(start, stop, block)]
    others = [(i, min(i + block, start)) for i in range(0, start, block)]
    others += [(i, min(i + block, n)) for i in range(stop, n, block)]
    plan = [_Tile(query, query, position, None) for position, query in enumerate(queries)]
    for position, query in enumerate(queries):
        partners = [
            (later, position + 1 + offset) for offset, later in enumerate(queries[position + 1 :])
        ]
        partners += [(other, None) for other in others]
        for (first, last), partner in partners:
            for column in range(first, last, column_tile):
                columns = (column, min(column + column_tile, last))
                plan.append(_Tile(query, columns, position, partner))
    return plan


def _candidate_pass(
    candidates: torch.Tensor, lists: _CandidateLists, plan: list[_Tile], start: int, workers: int
) -> None:
    """Multiply and scan every tile of ``plan`` into ``lists``, on ``workers`` threads.

    Each worker takes the next tile, multiplies it on its own thread (single-threaded torch:
    independent products scale better than one product split over threads, and leave no thread
    waiting while another scans), and scans it while holding the locks of the list blocks it
    writes. A block's off-diagonal tiles wait until its diagonal tile has started its lists.
    """
    blocks = 1 + max((tile.row_block for tile in plan), default=0)
    locks = [threading.Lock() for _ in range(blocks)]
    started = [threading.Event() for _ in range(blocks)]
    height = max((tile.rows[1] - tile.rows[0] for tile in plan), default=0)
    width = max((tile.columns[1] - tile.columns[0] for tile in plan), default=0)
    handout = iter(plan)
    handout_lock = threading.Lock()
    tiles = stage_progress("pairs", total=len(plan), unit="tiles")  # one update per tile

    failed = threading.Event()

    def work() -> None:
        try:
            take_tiles()
        except BaseException:
            # Wake the workers waiting for a diagonal tile this one will never finish.
            failed.set()
            for event in started:
                event.set()
            raise

    def take_tiles() -> None:
        buffer = torch.empty(height * width, dtype=candidates.dtype)
        with torch.inference_mode():  # thread-local: each worker needs its own
            while not failed.is_set():
                with handout_lock:
                    tile = next(handout, None)
                if tile is None:
                    return
                (r0, r1), (c0, c1) = tile.rows, tile.columns
                scores = buffer[: (r1 - r0) * (c1 - c0)].view(r1 - r0, c1 - c0)
                torch.mm(candidates[r0:r1], candidates[c0:c1].T, out=scores)
                if tile.diagonal:
                    scores.fill_diagonal_(-torch.inf)  # a row is not its own neighbour
                    with locks[tile.row_block]:
                        lists.scan(scores, tile.rows, tile.columns, False, start)
                    started[tile.row_block].set()
                    tiles.update()
                    continue
                written = sorted({tile.row_block, tile.column_block} - {None})
                for block in written:
                    started[block].wait()
                if failed.is_set():
                    return
                with contextlib.ExitStack() as held:
                    for block in written:  # in index order: no two workers wait on each other
                        held.enter_context(locks[block])
                    lists.scan(
                        scores, tile.rows, tile.columns, tile.column_block is not None, start
                    )
                tiles.update()

    with tiles, one_thread(), ThreadPoolExecutor(workers, thread_name_prefix="allpairs") as pool:
        for done in [pool.submit(work) for _ in range(workers)]:
            done.result()


class _CandidateLists:
    """Each query row's ``width`` best candidate scores so far, and its admission threshold.

    numpy arrays, which the compiled scan (:mod:`sbert_pipeline.vectors.tile_scan`) updates in
    place.
    """

    def __init__(
        self,
        m: int,
        k: int,
        width: int,
        norms: torch.Tensor,
        max_norm: float,
        bound: float,
    ) -> None:
        self.k = k
        self.scores = np.full((m, width), -np.inf, dtype=np.float32)  # each row descending
        self.ids = np.full((m, width), -1, dtype=np.int64)
        self.thresholds = np.full(m, -np.inf, dtype=np.float32)  # admit scores above
        # Integer keys of the thresholds (see sbert_pipeline.vectors.tile_scan); below every score
        # at first.
        self.keys = np.full(m, np.iinfo(np.int32).min, dtype=np.int32)
        # Twice the per-row bound on |candidate - final| (see candidate_error_bound).
        self.margins = (2 * bound * max_norm * norms).float().numpy().copy()

    def scan(
        self,
        tile: torch.Tensor,
        rows: tuple[int, int],
        columns: tuple[int, int],
        both_sides: bool,
        start: int,
    ) -> None:
        """Merge a score tile (rows ``rows``, columns ``columns`` of the score matrix; query
        rows are counted from ``start``) into the lists of its rows, and of its columns when
        ``both_sides``."""
        bf16 = tile.dtype == torch.bfloat16
        keys = tile.view(torch.int16 if bf16 else torch.int32).numpy()
        shift = 16 if bf16 else 0
        height, width = rows[1] - rows[0], columns[1] - columns[0]
        state = (self.scores, self.ids, self.thresholds, self.keys, self.margins)
        if rows == columns:  # the rows' first tile: their lists are empty
            start_lists(keys, height, width, rows[0] - start, columns[0], *state, self.k, shift)
            return
        column_list = columns[0] - start if both_sides else 0
        scan_tile(
            keys, height, width, rows[0] - start, rows[0], column_list, columns[0], both_sides,
            *state, self.k, shift,
        )  # fmt: skip

    def proven(self) -> np.ndarray:
        """``(m,)`` bool: rows whose list provably holds their exact top-k."""
        return self.scores[:, -1] < self.scores[:, self.k - 1] - self.margins


def _final_topk(
    data: torch.Tensor,
    lists: _CandidateLists,
    proven: np.ndarray,
    start: int,
    k: int,
    stats: SelfTopkStats | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Rescore each proven row's candidates within the margin of its k-th and pick the top k
    (unproven rows are left for the fallback)."""
    m = len(proven)
    indices = np.zeros((m, k), np.int64)
    scores = np.zeros((m, k), np.float32)
    # Row ranges on parallel threads (the kernel releases the GIL): reading the candidate rows
    # is memory-latency bound, which more threads hide.
    parts = max(1, min(torch.get_num_threads(), m // 1024))
    bounds = np.linspace(0, m, parts + 1).astype(int)

    def part(first: int, last: int) -> int:
        rows = slice(first, last)
        return rescored_topk(
            data.numpy(), lists.scores[rows], lists.ids[rows], lists.margins[rows], proven[rows],
            start + first, k, indices[rows], scores[rows],
        )  # fmt: skip

    with ThreadPoolExecutor(parts, thread_name_prefix="allpairs-rescore") as pool:
        rescored = sum(pool.map(part, bounds[:-1], bounds[1:]))
    if stats is not None:
        stats.rescored_pairs += rescored
    return indices, scores


def pair_scores(data: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Final scores of pairs ``(a[i], b[i])``: float32 products summed in float64, to float32.

    Products of two float32 numbers are exact in float64 and the float64 sum is within
    ``dim u64`` of exact, so the score is the float32 rounding of the exact inner product (but
    for ties with a rounding boundary) and does not depend on which row asks or how the pair was
    found: ``score(x, y) == score(y, x)`` and duplicates tie exactly
    (:mod:`sbert_pipeline.vectors.exact_scores`).
    """
    out = np.empty(len(a), dtype=np.float32)
    pair_scores_into(data.numpy(), a.numpy(), b.numpy(), out)
    return torch.from_numpy(out)


def _exact_rows(
    data: torch.Tensor,
    query_rows: torch.Tensor,
    k: int,
    norms: torch.Tensor,
    max_norm: float,
    block: int,
    stats: SelfTopkStats | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of ``query_rows`` against every row: fp32 products find every pair within the
    fp32 margin of the k-th best, which are rescored; no candidate width, so always proven."""
    n, dim = data.shape
    bound = candidate_error_bound(dim, bf16=False)
    indices = np.empty((len(query_rows), k), np.int64)
    scores = np.empty((len(query_rows), k), np.float32)
    # Rows per step so that the (rows, n) fp32 score block holds about block^2 scores, or 16 MB
    # when the block is small (a few rows per step would be all overhead).
    step = max(1, max(block * block, _DENSE_SCORES) // n)
    for first in range(0, len(query_rows), step):
        rows = query_rows[first : first + step]
        tile = data[rows] @ data.T  # (r, n) fp32
        tile[torch.arange(len(rows)), rows] = -torch.inf
        found = tile_topk(data, rows, tile, k, 2 * bound * max_norm * norms[rows].float())
        if stats is not None:
            stats.rescored_pairs += found.rescored
        indices[first : first + len(rows)] = found.indices
        scores[first : first + len(rows)] = found.scores
    return indices, scores


@contextlib.contextmanager
def exact_fp32_matmul() -> Iterator[None]:
    """fp32 products in fp32 inside: the error bound assumes no bf16/TF32 GEMM."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def checked_vectors(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as contiguous float32 ``(n, d)``, ``n >= 2``, finite and small enough.

    Raises:
        ValueError: the shape, a NaN or infinite value, or norms that could overflow float32.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[1] < 1:
        raise ValueError(f"vectors must be a 2-d (n, d) array with d >= 1, got {vectors.shape}")
    if len(vectors) < 2:
        raise ValueError(f"need at least 2 vectors to pair, got {len(vectors)}")
    # max and min propagate NaN, so one pass each checks finiteness and size without temporaries.
    low, high = float(vectors.min()), float(vectors.max())
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("vectors contain NaN or infinite values")
    if max(-low, high) * math.sqrt(vectors.shape[1]) > _MAX_NORM:
        raise ValueError(f"vector norms must stay below {_MAX_NORM:g} (float32 inner products)")
    return vectors


def query_row_range(rows: tuple[int, int] | None, n: int) -> tuple[int, int]:
    """The query range ``[start, stop)`` (all ``n`` rows for None), checked against ``n``."""
    if rows is None:
        return 0, n
    start, stop = rows
    if not 0 <= start <= stop <= n:
        raise ValueError(f"rows must satisfy 0 <= start <= stop <= {n}, got {rows}")
    return int(start), int(stop)
