"""Exact search within one block of vectors: top-k lists and every pair above a threshold.

Beam-free. A *block* is a set of vectors searched exactly against itself: :func:`search_block`
gives every member its top-``k`` other members and every pair of members at or above a
threshold. The exact mode of ``sbert pairs`` is one block holding all vectors, its query rows
split into ranges between workers; the clustered mode cuts the vectors into many overlapping
blocks (:mod:`sbert_pipeline.vectors.block_plan`).

Scores are inner products of the rows as given, so pass L2-normalised rows for cosine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sbert_pipeline.vectors.allpairs import candidate_error_bound, pair_scores, self_topk
from sbert_pipeline.vectors.checks import check_cosine
from sbert_pipeline.vectors.precision import Precision
from sbert_pipeline.vectors.topk import neighbors_above

# Rows of a threshold search at a time (rows whose top-k list is all above the threshold): the
# hits of one chunk are held in memory, and 256 rows keep the matrix product efficient.
_ABOVE_CHUNK = 256
# precision="auto" searches blocks smaller than this in fp32: the bf16 candidate pass only pays
# off on larger ones (measured per row on 384-d blocks: 1.2k rows fp32 128 us vs bf16 153 us,
# 2k 134 vs 157, 4k 153 vs 127, 10k 198 vs 151).
_BF16_MIN_ROWS = 4096
# A warm-up searches two blocks of random rows (diagonal and off-diagonal tiles: every kernel),
# small ones: loading is all it is for (about 0.45 CPU-s here, all of it saved on the first
# search; two default blocks would compute for as long again).
_WARM_UP_ROWS, _WARM_UP_BLOCK = 512, 256


@dataclass(frozen=True)
class BlockResult:
    """Neighbour lists and pairs of a block's query rows, as positions within the block.

    Attributes:
        indices: ``(m, k')`` neighbour positions of the query rows, ``k' = min(k, n - 1)``,
            most similar first, equal scores by position.
        scores: ``(m, k')`` float32.
        pair_a, pair_b, pair_scores: every pair ``a < b`` with ``a`` a query row and score at
            or above the threshold (empty without one), sorted by ``(a, b)``.
    """

    indices: np.ndarray
    scores: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_scores: np.ndarray


def search_block(
    vectors: np.ndarray,
    k: int,
    *,
    threshold: float | None = None,
    rows: tuple[int, int] | None = None,
    precision: Precision = "auto",
    block_size: int | None = None,
) -> BlockResult:
    """Exact top-``k`` and exact pairs above ``threshold`` of the query rows within one block.

    Pairs come from the top-k lists where that is complete: a row whose k-th score is below the
    threshold has every neighbour above it in its list. Rows whose whole list is at or above
    the threshold (they may have more such neighbours) get an exact threshold search against
    the block, so the pairs are every pair above the threshold, however many, at the cost of
    one extra search for those rows only.

    Args:
        vectors: ``(n, d)`` float32 rows of the block (finite).
        k: neighbours wanted; a block with fewer than ``k + 1`` rows gives ``n - 1``.
        threshold: in ``[-1, 1]``; ``None`` finds no pairs.
        rows: the query rows ``[start, stop)`` (default all); pairs are those whose smaller
            position ``a`` is a query row, so calls over disjoint ranges find disjoint pairs.
        precision: candidate pass of :func:`sbert_pipeline.vectors.allpairs.self_topk` (the answer
        is
            the fp32 one either way); ``auto`` is fp32 for blocks of fewer than 4,096 rows.
        block_size: query rows per similarity tile (default: the search's own).

    Raises:
        ValueError: ``k < 1``, a threshold outside ``[-1, 1]``, bad rows or non-finite values.
    """
    n = len(vectors)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if threshold is not None:
        check_cosine(threshold)
    start, stop = rows if rows is not None else (0, n)
    if not 0 <= start <= stop <= n:
        raise ValueError(f"rows must satisfy 0 <= start <= stop <= {n}, got {rows}")
    k_block = min(k, n - 1)
    if k_block < 1 or start == stop:
        indices = np.zeros((stop - start, max(k_block, 0)), np.int64)
        scores = np.zeros(indices.shape, np.float32)
    else:
        if precision == "auto" and n < _BF16_MIN_ROWS:
            precision = "float32"
        indices, scores = self_topk(
            vectors, k_block, rows=(start, stop), block_size=block_size, precision=precision
        )
    if threshold is None or k_block < 1:
        empty = np.zeros(0, np.int64)
        return BlockResult(indices, scores, empty, empty.copy(), np.zeros(0, np.float32))
    a, b, s = _pairs_above(vectors, indices, scores, threshold, start)
    return BlockResult(indices, scores, a, b, s)


def warm_up(dim: int, k: int, precision: Precision = "auto") -> None:
    """Load what a process's first search loads (numba's compiled kernels from their disk
    cache, the matrix library's code) by searching a few random rows the way a large block is
    searched (``precision`` as given, bf16 included), so that a caller can pay for it while it
    waits for something else: the pairs launcher, while Arrow reads the vectors."""
    rows = np.random.default_rng(0).standard_normal((_WARM_UP_ROWS, dim), dtype=np.float32)
    self_topk(rows, min(k, _WARM_UP_ROWS - 1), block_size=_WARM_UP_BLOCK, precision=precision)


def _pairs_above(
    vectors: np.ndarray, indices: np.ndarray, scores: np.ndarray, threshold: float, start: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair ``a < b`` above the threshold with ``a`` among the rows of the lists.

    Scores are the top-k search's (float32 products summed in float64, rounded to float32), so
    that a pair's score, and whether it clears the threshold, does not depend on how it was
    found: the threshold search runs in fp32 with a margin and rescores what it finds the same
    way.
    """
    n, dim = vectors.shape
    m, k = indices.shape
    limit = np.float32(threshold)
    rows = np.arange(start, start + m, dtype=np.int64)
    # A list holding all other rows is complete whatever its scores.
    saturated = scores[:, -1] >= limit if k < n - 1 else np.zeros(m, bool)
    listed = (scores >= limit) & (indices > rows[:, None]) & ~saturated[:, None]
    found_a = [np.broadcast_to(rows[:, None], indices.shape)[listed]]
    found_b = [indices[listed]]
    found_s = [scores[listed]]
    full = rows[saturated]
    if len(full):
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
        margin = candidate_error_bound(dim, bf16=False) * float(norms.max()) ** 2
    for first in range(0, len(full), _ABOVE_CHUNK):
        part = full[first : first + _ABOVE_CHUNK]
        low = int(part[0])  # rows ascend: only columns from here on can be a larger partner
        hits = neighbors_above(
            vectors[part],
            vectors[low:],
            threshold - margin,
            exclude_self=True,
            query_positions=part - low,
        )
        for row, (columns, _) in zip(part, hits, strict=True):
            columns = columns[columns + low > row] + low
            final = _rescore(vectors, row, columns)
            above = final >= limit
            found_a.append(np.full(int(above.sum()), row, np.int64))
            found_b.append(columns[above])
            found_s.append(final[above])
    a, b, s = np.concatenate(found_a), np.concatenate(found_b), np.concatenate(found_s)
    order = np.lexsort((b, a))
    return a[order], b[order].astype(np.int64), s[order].astype(np.float32)


def _rescore(vectors: np.ndarray, row: int, columns: np.ndarray) -> np.ndarray:
    """Scores of ``row`` with ``columns`` exactly as
    :func:`sbert_pipeline.vectors.allpairs.self_topk` gives them
    (:func:`sbert_pipeline.vectors.allpairs.pair_scores`)."""
    with torch.inference_mode():
        columns_t = torch.from_numpy(np.ascontiguousarray(columns, dtype=np.int64))
        rows_t = torch.full_like(columns_t, row)
        return pair_scores(torch.from_numpy(vectors), rows_t, columns_t).numpy()
