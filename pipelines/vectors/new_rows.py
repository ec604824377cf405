"""Exact search of some rows against every row: what an incremental pairs run computes (Beam-free).

When a set of vectors gained rows since its all-pairs search, only the pairs that involve a new
row are unknown. :func:`search_rows` scores the query rows (the new ones, and old rows whose
list must be searched again) against every row, one fp32 tile of ``(r, n)`` scores at a time,
and from each tile takes

- each query row's exact top-k (:func:`sbert_pipeline.vectors.tile_topk.tile_topk`);
- every pair of a *new* query row at or above a threshold, each pair once;
- for every old row that takes insertions (``floors``), the new rows scoring at or above its
  floor (its previous k-th score): the only new rows that can enter its list.

Every score kept is the final score of :mod:`sbert_pipeline.vectors.exact_scores` (float32 products
summed in float64, rounded to float32), the one function the full search uses, so a pair scores
the same bits whichever run found it, and its place at the threshold or in a list does not
depend on the path. The fp32 tile only nominates candidates: each test admits every pair within
:func:`sbert_pipeline.vectors.allpairs.candidate_error_bound` of its limit, and the final score
decides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sbert_pipeline.vectors.allpairs import (
    candidate_error_bound,
    checked_vectors,
    exact_fp32_matmul,
)
from sbert_pipeline.vectors.checks import check_cosine
from sbert_pipeline.vectors.tile_topk import final_scores, tile_topk

# Scores per tile (256 MB of fp32, as sbert_pipeline.vectors.topk's tiles): a few hundred query rows
# per product at n = 200k, where the product of 83 rows ran at a third of the speed here.
_TILE_SCORES = 1 << 26


@dataclass(frozen=True)
class RowsResult:
    """What :func:`search_rows` found, as positions into the vectors.

    Attributes:
        indices, scores: ``(m, k)`` top-k of each query row (score descending, ties by position).
        pair_a, pair_b, pair_scores: every pair ``a < b`` with a new query row at one end and a
            final score at or above the threshold, each once, sorted by ``(a, b)``.
        insert_row, insert_neighbor, insert_score: ``(old row, new row, final score)`` for each
            old row with a finite floor and each new query row scoring at or above that floor.
    """

    indices: np.ndarray
    scores: np.ndarray
    pair_a: np.ndarray
    pair_b: np.ndarray
    pair_scores: np.ndarray
    insert_row: np.ndarray
    insert_neighbor: np.ndarray
    insert_score: np.ndarray


def search_rows(
    vectors: np.ndarray,
    queries: np.ndarray,
    k: int,
    *,
    new: np.ndarray,
    threshold: float | None = None,
    floors: np.ndarray | None = None,
) -> RowsResult:
    """Exact top-k of ``queries`` against every row, and the new rows' pairs and insertions.

    Args:
        vectors: ``(n, d)`` float32, finite (L2-normalised rows make the scores cosines).
        queries: sorted distinct positions to search (new rows and old rows searched again).
        k: neighbours per query, ``1 <= k <= n - 1``.
        new: ``(n,)`` bool, the new rows; only new query rows give pairs and insertions.
        threshold: pairs of a new row at or above it (``None``: no pairs).
        floors: ``(n,)`` float32, per old row the score a new row must reach to enter its list
            (``+inf``: none, e.g. for rows that are searched again); ``None``: no insertions.

    Raises:
        ValueError: shapes, ``k`` or ``threshold`` out of range, or unsorted queries.
    """
    vectors = checked_vectors(vectors)
    n, dim = vectors.shape
    queries = np.asarray(queries, np.int64)
    new = np.asarray(new, bool)
    if new.shape != (n,):
        raise ValueError(f"new must hold one bool per row ({n}), got shape {new.shape}")
    if not 1 <= k <= n - 1:
        raise ValueError(f"k must be between 1 and {n - 1} (the other rows), got {k}")
    if len(queries) and (queries[0] < 0 or queries[-1] >= n or np.any(np.diff(queries) <= 0)):
        raise ValueError(f"queries must be sorted distinct positions in [0, {n})")
    if threshold is not None:
        check_cosine(threshold)
    if floors is not None and np.shape(floors) != (n,):
        raise ValueError(f"floors must hold one score per row ({n}), got {np.shape(floors)}")
    found = _Found(len(queries), k)
    with exact_fp32_matmul(), torch.inference_mode():
        data = torch.from_numpy(vectors)
        norms = torch.linalg.vector_norm(data, dim=1) * (1 + 1e-5)  # upper bounds, as allpairs
        max_norm = float(norms.max())
        bound = candidate_error_bound(dim, bf16=False)
        # |candidate - final| <= bound |x||y| <= slack for every pair.
        slack = bound * max_norm * max_norm
        step = max(1, _TILE_SCORES // n)
        # One pass over a tile finds the candidates of both tests: each column's lower limit.
        limit = torch.full((n,), torch.inf)
        if floors is not None:
            limit = torch.from_numpy(np.asarray(floors, np.float32)) - slack
        if threshold is not None:
            limit = limit.clamp(max=threshold - slack)
        for first in range(0, len(queries), step):
            rows = torch.from_numpy(queries[first : first + step])
            tile = data[rows] @ data.T  # (r, n) fp32
            tile[torch.arange(len(rows)), rows] = -torch.inf
            top = tile_topk(data, rows, tile, k, 2 * bound * max_norm * norms[rows])
            found.lists(first, top.indices, top.scores)
            fresh = torch.from_numpy(new[rows.numpy()])
            if not bool(fresh.any()):
                continue
            fresh_tile = tile if bool(fresh.all()) else tile[fresh]
            row, column = (fresh_tile >= limit[None, :]).nonzero(as_tuple=True)
            new_rows, column = rows[fresh].numpy()[row.numpy()], column.numpy()
            final = final_scores(vectors, new_rows, column)
            if threshold is not None:
                found.pairs(new_rows, column, final, threshold, new)
            if floors is not None:
                found.insertions(new_rows, column, final, floors)
    return found.result()


class _Found:
    """The results of :func:`search_rows` as they come, tile by tile."""

    def __init__(self, m: int, k: int) -> None:
        self.indices = np.zeros((m, k), np.int64)
        self.scores = np.zeros((m, k), np.float32)
        self.pair_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.insert_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def lists(self, first: int, indices: np.ndarray, scores: np.ndarray) -> None:
        self.indices[first : first + len(indices)] = indices
        self.scores[first : first + len(indices)] = scores

    def pairs(self, rows, columns, final, threshold: float, new: np.ndarray) -> None:
        """The pairs of new ``rows`` at or above ``threshold`` (final score); a pair of two new
        rows is kept from its smaller row's side only."""
        keep = (final >= np.float32(threshold)) & (~new[columns] | (columns > rows))
        a, b = rows[keep], columns[keep]
        self.pair_parts.append((np.minimum(a, b), np.maximum(a, b), final[keep]))

    def insertions(self, rows, columns, final, floors: np.ndarray) -> None:
        """``(old row, new row, score)`` where the new row reaches the old row's floor."""
        keep = final >= floors[columns]
        self.insert_parts.append((columns[keep], rows[keep], final[keep]))

    def result(self) -> RowsResult:
        a, b, s = concat_columns(self.pair_parts)
        order = np.lexsort((b, a))
        rows, neighbors, scores = concat_columns(self.insert_parts)
        return RowsResult(
            self.indices, self.scores, a[order], b[order], s[order], rows, neighbors, scores
        )


def concat_columns(parts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parts of ``(positions, positions, scores)`` as one triple (empty int64/float32 if none)."""
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))
