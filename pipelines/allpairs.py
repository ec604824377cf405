"""Exact all-pairs nearest neighbours of one set of vectors with itself (Beam-free).

:func:`self_topk` gives every row its ``k`` most similar other rows (inner product, i.e. cosine
for L2-normalised rows), exactly in float32, with ties broken by the smaller index.
:func:`pairs_above` turns such neighbour lists into unique pairs ``a < b`` above a threshold, and
:func:`self_pairs_above` finds every pair above a threshold exactly, however many there are.

How :func:`self_topk` is fast and still exact:

1. **Candidate pass over the upper triangle.** The rows are cut into blocks; each pair of blocks
   ``I <= J`` is multiplied once, ``S = X_I X_J^T``, and ``S`` serves the rows of ``I`` and
   (read by columns) the rows of ``J``, which halves the matrix products. On CPUs with native
   bfloat16 the products run in bf16 (2-2.6x the fp32 throughput on AVX512-BF16). Each row keeps
   a running list of its ``w = k + extra`` best candidate scores. A tile is scanned cheaply: the
   maximum of every group of ``_GROUP`` scores is compared with each row's admission threshold,
   and only groups above it are read and merged into the lists. The next tile's product runs in
   a background thread while the current one is scanned.
2. **Proof.** Let ``delta`` bound the difference between a candidate score and the final score
   of the same pair (see :func:`candidate_error_bound`). Each row's k-th best candidate score is
   ``c_k``; any pair left out of its list scored at most ``max(c_w, c_k - 2 delta)`` in the
   candidate pass. When ``c_w < c_k - 2 delta``, everything left out has a final score
   ``< c_k - delta``, below each of the ``k`` best listed pairs, so the exact top-k (ties at the
   k-th place included) lies in the list.
3. **Final scores.** The listed pairs within ``2 delta`` of ``c_k`` are scored again from the
   float32 vectors with float64 accumulation, rounded to float32 (the same function for every
   pair, so a pair's score does not depend on where or how it was found, and exact duplicates tie
   exactly), and the top ``k`` are taken by score, then index.
4. **Fallback.** Rows whose list does not satisfy the proof (more than ``extra`` candidates
   within ``2 delta`` of the k-th) are searched again against every row with fp32 products, whose
   bound is tiny; all pairs within its margin are rescored as in step 3. The number of such rows is
   reported in :class:`SelfTopkStats`.

Memory is bounded by ``block_size``: one ``block_size x block_size`` score tile and the running
lists (``m x w``), never an ``n x n`` matrix.

Example:
    >>> indices, scores = self_topk(vectors, k=10)  # each row's 10 nearest other rows
    >>> a, b, s = pairs_above(indices, scores, threshold=0.9)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from pipelines.kmeans import Precision, one_thread, use_bf16

# Rows per block and tile side when block_size is not given: a 4,096 x 4,096 bf16 tile is 32 MB
# and its matrix product is long enough that the per-tile bookkeeping in Python is noise.
DEFAULT_BLOCK_SIZE = 4096
# Scores per group in the tile scan: one maximum per group is compared with the row's threshold.
# Groups are strided (columns g, g + c/G, ...) so that the maxima are elementwise maxima of G
# contiguous slices, which vectorise; contiguous groups of 32 took 3x longer to reduce.
_GROUP = 16
# Rows with more hit groups than this in a tile (all rows in the first tiles) gather their
# `min(hits, w)` best groups whole; the others gather just their hit groups and merge only the
# scores above their threshold.
_FEW_GROUPS = 16
# Rows per part when rows gather many groups of a tile (keeps temporaries to a few MB).
_ROWS_PER_PART = 256
# Pairs per chunk when rescoring in float64 (buffers of 3 MB: larger chunks ran slower).
_RESCORE_CHUNK = 1024
# Scores per step of the dense fp32 search, at least (16 MB).
_DENSE_SCORES = 1 << 22
# Rows per block when ordering the pairs to rescore (two blocks of 384-d rows fit in cache).
_RESCORE_BLOCK = 2048
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
        block_size: rows per block; one ``block_size^2`` score tile is in memory at a time
            (default :data:`DEFAULT_BLOCK_SIZE`).
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
    vectors = _checked_vectors(vectors)
    n, dim = vectors.shape
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must be between 1 and {n - 1} (the other rows), got {k}")
    start, stop = _checked_rows(rows, n)
    block = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    if block < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    bf16 = use_bf16(precision)
    width = min(n - 1, k + max(_MIN_EXTRA, k))
    if stats is not None:
        stats.rows += stop - start
        stats.precision = "bfloat16" if bf16 else "float32"
        stats.candidate_width = width
    with _exact_fp32_matmul(), torch.inference_mode():
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
        plan = list(_tile_plan(n, start, stop, block))
        for (tile_rows, tile_columns, both_sides), tile in _products(candidates, plan, block):
            b, c = tile_rows[1] - tile_rows[0], tile_columns[1] - tile_columns[0]
            with one_thread():
                if tile_rows == tile_columns:
                    tile.fill_diagonal_(-torch.inf)  # a row is not its own neighbour
                lists.offer(
                    tile[:b], _group_maxima(tile, 1)[:b], tile_rows[0] - start, tile_columns[0]
                )
                if both_sides:
                    lists.offer(
                        tile.T[:c],
                        _group_maxima(tile, 0)[:c],
                        tile_columns[0] - start,
                        tile_rows[0],
                    )
        with one_thread():
            proven = lists.proven()
            indices, scores = _final_topk(data, lists, proven, start, k, stats)
        unproven = (~proven).nonzero().squeeze(1)
        if len(unproven):
            if stats is not None:
                stats.fallback_rows += len(unproven)
            again_ids, again_scores = _exact_rows(
                data, unproven + start, k, norms, max_norm, block, stats
            )
            indices[unproven.numpy()] = again_ids
            scores[unproven.numpy()] = again_scores
    return indices, scores


def _tile_plan(
    n: int, start: int, stop: int, block: int
) -> Iterator[tuple[tuple[int, int], tuple[int, int], bool]]:
    """The tiles to compute: ``(row range, column range, serves the columns too)``.

    Query blocks (inside ``[start, stop)``) pair with themselves and each later query block once
    (both sides served); rows outside the query range are columns only. The diagonal tiles come
    first so that every row has a full candidate list, hence a useful threshold, early on.
    """
    queries = [(i, min(i + block, stop)) for i in range(start, stop, block)]
    others = [(i, min(i + block, start)) for i in range(0, start, block)]
    others += [(i, min(i + block, n)) for i in range(stop, n, block)]
    for query in queries:
        yield query, query, False
    for position, query in enumerate(queries):
        for later in queries[position + 1 :]:
            yield query, later, True
        for other in others:
            yield query, other, False


def _products(
    candidates: torch.Tensor, plan: list, block: int
) -> Iterator[tuple[tuple, torch.Tensor]]:
    """Yield ``(plan entry, padded score tile)``, computing the next tile in a background thread
    while the caller scans the current one (the scan runs on one thread; the product uses all).
    Two buffers alternate, so a tile stays valid until the next one is asked for."""
    buffers = (_TileBuffer(block, candidates.dtype), _TileBuffer(block, candidates.dtype))

    def product(position: int) -> torch.Tensor:
        rows, columns, _ = plan[position]
        with torch.inference_mode():  # thread-local: the worker needs its own
            return buffers[position % 2].product(
                candidates[rows[0] : rows[1]], candidates[columns[0] : columns[1]]
            )

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="allpairs-product") as worker:
        pending = worker.submit(product, 0) if plan else None
        for position, entry in enumerate(plan):
            tile = pending.result()
            if position + 1 < len(plan):
                pending = worker.submit(product, position + 1)
            yield entry, tile


class _CandidateLists:
    """Each query row's ``width`` best candidate scores so far, and its admission threshold."""

    def __init__(
        self,
        m: int,
        k: int,
        width: int,
        norms: torch.Tensor,
        max_norm: float,
        bound: float,
    ) -> None:
        self.k, self.width = k, width
        self.scores = torch.full((m, width), -torch.inf)  # (m, w) float32, descending
        self.ids = torch.full((m, width), -1, dtype=torch.int64)  # (m, w)
        # Twice the per-row bound on |candidate - final| (see candidate_error_bound).
        self.margin = (2 * bound * max_norm * norms).float()  # (m,)
        self.threshold = torch.full((m,), -torch.inf)  # (m,) admit scores strictly above

    def offer(self, tile: torch.Tensor, maxima: torch.Tensor, rows: int, columns: int) -> None:
        """Merge a score tile into the lists of its rows.

        Args:
            tile: ``(q, t)`` scores, a view (possibly transposed) of a padded tile that starts
                at the beginning of its storage: row ``i`` is query row ``rows + i`` (counted
                from the start of the query range), column ``j`` is vector ``columns + j``;
                padding columns hold ``-inf``.
            maxima: ``(q, t / G)`` group maxima of ``tile`` as integer keys
                (:func:`_group_maxima`): group ``g`` holds columns ``g + s t / G``.
        """
        q, t = tile.shape
        # hit <=> the group's maximum exceeds the row's threshold (see _admission_keys).
        keys = _admission_keys(self.threshold[rows : rows + q], tile.dtype)
        active = (maxima.amax(dim=1) >= keys).nonzero().squeeze(1)  # rows with any hit
        if not len(active):
            return
        maxima, keys = maxima[active], keys[active]
        hit = maxima >= keys[:, None]  # (a, t / G)
        counts = hit.sum(dim=1)
        row_step, column_step = tile.stride()
        span = (q - 1) * row_step + (t - 1) * column_step + 1
        flat = torch.as_strided(tile, (span,), (1,))  # the tile's memory, 1-d
        spread = torch.arange(_GROUP) * (t // _GROUP)  # offsets of a group's members
        many = counts > _FEW_GROUPS
        if bool(many.any()):
            # Beyond w hit groups, the w groups with the largest maxima hold the row's w best
            # scores of the tile, and the rest cannot enter the list. Integer keys rank
            # negative groups backwards, so rows with fewer than w groups above zero that
            # would need that ranking take a plain top-w of the row instead.
            dense = many & (counts > self.width) & ((maxima >= 0).sum(dim=1) < self.width)
            self._take_dense(tile, active[dense], rows, columns)
            # In parts of rows: temporaries of a few MB are reused by malloc, larger ones are
            # fresh mappings whose page faults cost more than the work.
            for heavy in (many & ~dense).nonzero().squeeze(1).split(_ROWS_PER_PART):
                most = min(int(counts[heavy].max()), self.width)
                chosen = maxima[heavy].topk(most, dim=1, sorted=False).indices  # (h, most)
                picked = (chosen[:, :, None] + spread).flatten(1)  # (h, most G) tile columns
                # One flat gather: 2-d advanced indexing costs several times more per element.
                values = flat[active[heavy, None] * row_step + picked * column_step].float()
                self._merge(active[heavy] + rows, values, picked + columns)
            hit[many] = False
        which, group = hit.nonzero(as_tuple=True)  # sorted by row
        if len(which):
            row = active[which]
            self._merge_hits(flat, row, group, spread, row_step, column_step, rows, columns)

    def _merge_hits(
        self,
        flat: torch.Tensor,
        row: torch.Tensor,
        group: torch.Tensor,
        spread: torch.Tensor,
        row_step: int,
        column_step: int,
        rows: int,
        columns: int,
    ) -> None:
        """Gather the hit groups ``(row, group)`` (sorted by row), keep the scores above their
        row's threshold, and merge them: rows of few hits have about one score to add per tile,
        so the merge is a top-w over ``w + (most scores any row adds)`` per row."""
        picked = group[:, None] + spread  # (h, G) tile columns
        values = flat[row[:, None] * row_step + picked * column_step]  # (h, G)
        above = values.float() > self.threshold[row + rows][:, None]
        which, member = above.nonzero(as_tuple=True)  # sorted by row, as `row` is
        if not len(which):
            return
        row, column = row[which], picked[which, member]
        values = values[which, member].float()
        local, count = torch.unique_consecutive(row, return_counts=True)
        starts = torch.cumsum(count, 0) - count
        slot = torch.arange(len(row)) - torch.repeat_interleave(starts, count)
        wide = int(count.max())
        padded = torch.full((len(local), wide), -torch.inf)
        ids = torch.full((len(local), wide), -1, dtype=torch.int64)
        position = torch.repeat_interleave(torch.arange(len(local)), count)
        padded[position, slot] = values
        ids[position, slot] = column + columns
        self._merge(local + rows, padded, ids)

    def _take_dense(self, tile: torch.Tensor, tier: torch.Tensor, rows: int, columns: int):
        """Merge the plain top-w of the tile rows ``tier``."""
        for part in tier.split(_ROWS_PER_PART):
            top = tile[part].float().topk(self.width, dim=1)
            self._merge(part + rows, top.values, top.indices + columns)

    def _merge(self, rows: torch.Tensor, values: torch.Tensor, ids: torch.Tensor) -> None:
        """Merge candidate ``values`` with ``ids`` (``(r, c)`` each) into the lists of ``rows``."""
        if values.shape[1] > self.width:  # only the new top-w can enter: merge 2w, not w + c
            top = values.topk(self.width, dim=1)
            values, ids = top.values, ids.gather(1, top.indices)
        merged = torch.cat([self.scores[rows], values], dim=1)
        top = merged.topk(self.width, dim=1)  # sorted descending
        self.scores[rows] = top.values
        self.ids[rows] = torch.cat([self.ids[rows], ids], dim=1).gather(1, top.indices)
        kth = top.values[:, self.k - 1] - self.margin[rows]
        self.threshold[rows] = torch.maximum(top.values[:, -1], kth)

    def proven(self) -> torch.Tensor:
        """``(m,)`` bool: rows whose list provably holds their exact top-k."""
        return self.scores[:, -1] < self.scores[:, self.k - 1] - self.margin


class _TileBuffer:
    """One reused score tile with sides padded to multiples of ``_GROUP`` with ``-inf`` (page
    faults on a fresh 32 MB allocation per tile cost as much as scanning it)."""

    def __init__(self, block: int, dtype: torch.dtype) -> None:
        side = -(-block // _GROUP) * _GROUP
        self.storage = torch.empty(side * side, dtype=dtype)

    def product(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        """``left @ right.T`` in a padded ``(b', c')`` tile."""
        b, c = len(left), len(right)
        b_pad, c_pad = -(-b // _GROUP) * _GROUP, -(-c // _GROUP) * _GROUP
        tile = self.storage[: b_pad * c_pad].view(b_pad, c_pad)
        if (b_pad, c_pad) == (b, c):
            torch.mm(left, right.T, out=tile)
        else:
            tile.fill_(-torch.inf)
            tile[:b, :c] = left @ right.T
        return tile


_INTEGER_VIEW = {torch.bfloat16: torch.int16, torch.float32: torch.int32}


def _admission_keys(threshold: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Integer keys ``T`` with ``key(v) >= T <=> v > threshold`` for group maxima ``v``.

    For ``threshold >= 0``, ``T`` is one above the key of the largest ``dtype`` value not above
    the threshold (so the test is exact, also when the threshold is not representable). For a
    negative threshold every group is admitted, since a negative key does not tell how negative
    its group is.
    """
    integer = _INTEGER_VIEW[dtype]
    low = threshold.to(dtype)
    low = torch.where(low.float() > threshold, low.view(integer) - 1, low.view(integer))
    keys = low.to(torch.int32) + 1
    keys[threshold < 0] = torch.iinfo(integer).min
    return keys.to(integer)


def _group_maxima(tile: torch.Tensor, dim: int) -> torch.Tensor:
    """Maxima of strided groups along ``dim`` of a padded tile, as integer keys.

    ``dim=1``: ``(b, c/G)``, per row the maximum of columns ``g, g + c/G, ...``; ``dim=0``:
    ``(c, b/G)``, per column the maximum of rows ``g, g + b/G, ...``. Strided groups make the
    reduction an elementwise maximum of ``G`` contiguous slices.

    The scores are reduced as signed integers of the same width, which is 2-4x faster than a
    float reduction here. For non-negative floats the integer order is the float order, and
    every negative float is a negative integer; so a non-negative key is the group's float
    maximum (read it back with ``.view(tile.dtype)``), and a negative key says only that the
    whole group is negative.
    """
    keys = tile.view(_INTEGER_VIEW[tile.dtype])
    b, c = keys.shape
    if dim == 1:
        return keys.view(b, _GROUP, c // _GROUP).amax(dim=1)
    # Transposed to (c, b/G) contiguous: the rows of the result are gathered per column later.
    return keys.view(_GROUP, b // _GROUP, c).amax(dim=0).T.contiguous()


def _final_topk(
    data: torch.Tensor,
    lists: _CandidateLists,
    proven: torch.Tensor,
    start: int,
    k: int,
    stats: SelfTopkStats | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Rescore each proven row's candidates within the margin of its k-th and pick the top k."""
    kth = lists.scores[:, k - 1] - lists.margin
    keep = (lists.scores >= kth[:, None]) & proven[:, None]  # (m, w)
    row, slot = keep.nonzero(as_tuple=True)
    final = torch.full(lists.scores.shape, -torch.inf)
    final[row, slot] = _rescore_pairs(data, row + start, lists.ids[row, slot], stats)
    ids, scores = _by_score_then_index(lists.ids, final)
    return ids[:, :k].numpy().copy(), scores[:, :k].numpy().copy()


def _by_score_then_index(
    ids: torch.Tensor, scores: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row sorted by score descending, equal scores by index ascending."""
    by_index = ids.sort(dim=1, stable=True)
    scores = scores.gather(1, by_index.indices)
    by_score = scores.sort(dim=1, descending=True, stable=True)
    return by_index.values.gather(1, by_score.indices), by_score.values


def _rescore_pairs(
    data: torch.Tensor, a: torch.Tensor, b: torch.Tensor, stats: SelfTopkStats | None
) -> torch.Tensor:
    """:func:`_rescore` of the pairs ``(a[i], b[i])``, each unordered pair once (a quarter of
    the pairs are mutual neighbours), in an order that keeps the rows they read in cache."""
    n = len(data)
    low, high = torch.minimum(a, b), torch.maximum(a, b)
    pairs, where = torch.unique(low * n + high, return_inverse=True)  # sorted by (low, high)
    low, high = pairs // n, pairs % n
    # Sorted by block of `low` then block of `high`, each stretch reads two blocks of rows.
    blocks = -(-n // _RESCORE_BLOCK)
    order = (((low // _RESCORE_BLOCK) * blocks + high // _RESCORE_BLOCK) * n + low).argsort()
    scores = torch.empty(len(pairs), dtype=torch.float32)
    scores[order] = pair_scores(data, low[order], high[order])
    if stats is not None:
        stats.rescored_pairs += len(pairs)
    return scores[where]


def pair_scores(data: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Final scores of pairs ``(a[i], b[i])``: float32 products summed in float64, to float32.

    Products of two float32 numbers are exact in float64 and the float64 sum is within
    ``dim u64`` of exact, so the score is the float32 rounding of the exact inner product (but
    for ties with a rounding boundary) and does not depend on summation order or on which row
    asks: ``score(x, y) == score(y, x)`` and duplicates tie exactly.
    """
    out = torch.empty(len(a), dtype=torch.float32)
    if not len(a):
        return out
    # Reused buffers: fresh temporaries per chunk cost twice the arithmetic in page faults.
    chunk = min(_RESCORE_CHUNK, len(a))
    rows32 = torch.empty((chunk, data.shape[1]), dtype=torch.float32)
    left = torch.empty((chunk, data.shape[1]), dtype=torch.float64)
    right = torch.empty_like(left)
    sums = torch.empty(chunk, dtype=torch.float64)
    with one_thread():
        for first in range(0, len(a), chunk):
            m = min(chunk, len(a) - first)
            torch.index_select(data, 0, a[first : first + m], out=rows32[:m])
            left[:m].copy_(rows32[:m])
            torch.index_select(data, 0, b[first : first + m], out=rows32[:m])
            right[:m].copy_(rows32[:m])
            left[:m].mul_(right[:m])
            torch.sum(left[:m], dim=1, out=sums[:m])
            out[first : first + m] = sums[:m]
    return out


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
        kth = tile.topk(k, dim=1).values[:, -1]
        limit = kth - 2 * bound * max_norm * norms[rows].float()
        row, column = (tile >= limit[:, None]).nonzero(as_tuple=True)
        final = _rescore_pairs(data, rows[row], column, stats)
        # Sort all found pairs by (row, score desc, column) and keep the first k of each row.
        order = np.lexsort((column.numpy(), -final.numpy(), row.numpy()))
        row_sorted = row.numpy()[order]
        bounds = np.searchsorted(row_sorted, np.arange(len(rows)))
        picks = (bounds[:, None] + np.arange(k)).ravel()
        indices[first : first + len(rows)] = column.numpy()[order][picks].reshape(-1, k)
        scores[first : first + len(rows)] = final.numpy()[order][picks].reshape(-1, k)
    return indices, scores


@contextmanager
def _exact_fp32_matmul() -> Iterator[None]:
    """fp32 products in fp32: the error bound assumes no reduced-precision (bf16/TF32) GEMM."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def pairs_above(
    indices: np.ndarray, scores: np.ndarray, threshold: float, row_offset: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique pairs ``a < b`` with score ``>= threshold`` from neighbour lists.

    Only pairs present in some row's list are found: a row with more than ``k`` neighbours at
    or above the threshold loses the rest (unless those neighbours list it in turn). For every
    pair above a threshold use :func:`self_pairs_above`.

    Args:
        indices: ``(m, k)`` int64 neighbours of the rows ``row_offset .. row_offset + m - 1``
            (as returned by :func:`self_topk`, whose ``rows[0]`` is the offset).
        scores: ``(m, k)`` float32 scores of those neighbours.
        threshold: in ``[-1, 1]``, compared in float32.
        row_offset: index of the first row.

    Returns:
        ``a`` int64, ``b`` int64 and ``score`` float32 arrays, ``a < b``, each pair once,
        sorted by ``(a, b)``.

    Raises:
        ValueError: shapes disagree, or ``threshold`` is outside ``[-1, 1]``.
    """
    indices = np.asarray(indices)
    scores = np.asarray(scores, dtype=np.float32)
    if indices.ndim != 2 or indices.shape != scores.shape:
        raise ValueError(
            f"indices and scores must be 2-d of the same shape, got {indices.shape} and "
            f"{scores.shape}"
        )
    _check_threshold(threshold)
    keep = scores >= np.float32(threshold)
    row = np.broadcast_to(np.arange(len(indices), dtype=np.int64)[:, None] + row_offset, keep.shape)
    a, b, s = row[keep], indices[keep].astype(np.int64), scores[keep]
    low, high = np.minimum(a, b), np.maximum(a, b)
    order = np.lexsort((high, low))
    low, high, s = low[order], high[order], s[order]
    first = np.ones(len(low), dtype=bool)
    first[1:] = (low[1:] != low[:-1]) | (high[1:] != high[:-1])
    return low[first], high[first], s[first]


def self_pairs_above(
    vectors: np.ndarray,
    threshold: float,
    *,
    rows: tuple[int, int] | None = None,
    block_size: int | None = None,
    precision: Precision = "auto",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair ``a < b`` with score ``>= threshold``, exactly, however many there are.

    Scores are those of :func:`self_topk` (float64 sums of the float32 products, rounded to
    float32). Each pair of blocks is multiplied once (upper triangle) in the candidate dtype;
    pairs within the error bound below the threshold are rescored exactly. Memory grows with
    the number of pairs found, so use it with a threshold that keeps that number bounded.

    Args:
        vectors: ``(n, d)`` float32, finite.
        threshold: in ``[-1, 1]``, compared in float32.
        rows: return only the pairs whose smaller index ``a`` lies in ``[start, stop)``, so
            that the ranges of several calls partition the pairs.
        block_size: rows per block (one ``block_size^2`` tile in memory).
        precision: dtype of the candidate pass, as for :func:`self_topk`.

    Returns:
        ``a``, ``b`` int64 and ``score`` float32, sorted by ``(a, b)``.

    Raises:
        ValueError: bad ``vectors``, ``rows``, ``block_size``, ``threshold`` or ``precision``.
    """
    vectors = _checked_vectors(vectors)
    _check_threshold(threshold)
    n, dim = vectors.shape
    start, stop = _checked_rows(rows, n)
    block = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    if block < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    bf16 = use_bf16(precision)
    limit = np.float32(threshold)
    found_a, found_b, found_s = [], [], []
    with _exact_fp32_matmul(), torch.inference_mode():
        data = torch.from_numpy(vectors)
        norms = torch.linalg.vector_norm(data, dim=1) * (1 + 1e-5)
        slack = (candidate_error_bound(dim, bf16) * float(norms.max()) * norms).float()
        candidates = data.to(torch.bfloat16) if bf16 else data
        for first in range(start, stop, block):
            last = min(first + block, stop)
            # Candidate score >= threshold - bound |x_a||x_b| for every pair above the threshold.
            admit = (limit - slack[first:last])[:, None]
            for column in range(first, n, block):
                tile = candidates[first:last] @ candidates[column : column + block].T
                with one_thread():
                    row, other = (tile >= admit).nonzero(as_tuple=True)
                    a, b = row + first, other + column
                    upper = b > a
                    a, b = a[upper], b[upper]
                    scores = pair_scores(data, a, b)
                    keep = scores >= limit
                found_a.append(a[keep])
                found_b.append(b[keep])
                found_s.append(scores[keep])
    if not found_a:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32)
    a, b, s = (torch.cat(part).numpy() for part in (found_a, found_b, found_s))
    order = np.lexsort((b, a))
    return a[order], b[order], s[order]


def _checked_vectors(vectors: np.ndarray) -> np.ndarray:
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


def _checked_rows(rows: tuple[int, int] | None, n: int) -> tuple[int, int]:
    if rows is None:
        return 0, n
    start, stop = rows
    if not 0 <= start <= stop <= n:
        raise ValueError(f"rows must satisfy 0 <= start <= stop <= {n}, got {rows}")
    return int(start), int(stop)


def _check_threshold(threshold: float) -> None:
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must lie in [-1, 1], got {threshold}")
