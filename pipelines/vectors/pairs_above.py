"""Pairs of vectors at or above a similarity threshold (Beam-free).

:func:`pairs_above` turns neighbour lists (of :func:`sbert_pipeline.vectors.allpairs.self_topk`)
into unique pairs ``a < b`` above a threshold; :func:`self_pairs_above` finds every pair above a
threshold exactly, however many there are. Scores are those of ``self_topk``: float32 products
summed in float64, rounded to float32 (:func:`sbert_pipeline.vectors.allpairs.pair_scores`).

Example:
    >>> indices, scores = self_topk(vectors, k=10)
    >>> a, b, s = pairs_above(indices, scores, threshold=0.9)
"""

from __future__ import annotations

import numpy as np
import torch
from sbert_pipeline.vectors.allpairs import (
    DEFAULT_BLOCK_SIZE,
    candidate_error_bound,
    checked_vectors,
    exact_fp32_matmul,
    pair_scores,
    query_row_range,
)
from sbert_pipeline.vectors.checks import check_cosine
from sbert_pipeline.vectors.precision import Precision, one_thread, use_bf16


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
    check_cosine(threshold)
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
    vectors = checked_vectors(vectors)
    check_cosine(threshold)
    n, dim = vectors.shape
    start, stop = query_row_range(rows, n)
    block = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    if block < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    bf16 = use_bf16(precision)
    limit = np.float32(threshold)
    found_a, found_b, found_s = [], [], []
    with exact_fp32_matmul(), torch.inference_mode():
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
