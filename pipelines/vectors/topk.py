"""Exact neighbours by inner product, block by block so memory stays bounded (Beam-free).

Two searches over a corpus, both exact in fp32: :func:`topk_neighbors` (the ``k`` best rows per
query) and :func:`neighbors_above` (every row at or above a threshold). Scores are inner products
of the rows as given: pass L2-normalised vectors for cosine. Queries are cut into blocks of
``block_size`` rows and the corpus into tiles of ``corpus_block_size`` rows, so one score tile
(256 MB of fp32 by default) and the running results are in memory, never ``N x N``. The clusters
stage (communities) uses both; the pairs stage reuses them.

Example:
    >>> indices, scores = topk_neighbors(vectors, vectors, k=10)  # each row's 10 nearest others
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import torch

# Scores per tile when corpus_block_size is not given: wide tiles make torch's top-k cheaper per
# score (on 50k x 64 vectors, 1,024 x 50,000 tiles took half the time of 4,096 x 4,096 ones).
_TILE_SCORES = 2**26


def topk_neighbors(
    queries: np.ndarray,
    corpus: np.ndarray,
    k: int,
    block_size: int = 1024,
    exclude_self: bool = True,
    query_positions: np.ndarray | None = None,
    corpus_block_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` corpus rows with the largest inner product with each query, exactly (fp32).

    Args:
        queries: ``(nq, d)`` float32.
        corpus: ``(nc, d)`` float32.
        k: neighbours per query, ``1 <= k <= nc`` (``nc - 1`` with ``exclude_self``).
        block_size: query rows per block.
        exclude_self: leave out each query's own corpus row (by position, so an exact duplicate
            elsewhere in the corpus is still found).
        query_positions: ``(nq,)`` corpus row of each query, for ``exclude_self``; default
            ``0 .. nq-1``, i.e. the queries are the corpus or its first rows.
        corpus_block_size: corpus rows per tile (default: ``2^26 / block_size``, at least
            ``block_size``).

    Returns:
        ``indices`` ``(nq, k)`` int64 corpus rows and ``scores`` ``(nq, k)`` float32, each row
        sorted by score descending, equal scores by index ascending. Which of several rows with
        exactly the k-th score is kept is unspecified.

    Raises:
        ValueError: shapes disagree, ``k`` out of range, or positions out of range.
    """
    queries, corpus = _check_shapes(queries, corpus, block_size, corpus_block_size)
    n_queries, n_corpus = len(queries), len(corpus)
    positions = _self_positions(n_queries, n_corpus, exclude_self, query_positions)
    available = n_corpus - (1 if exclude_self else 0)
    if not 1 <= k <= available:
        raise ValueError(
            f"k must be between 1 and {available} (corpus rows"
            f"{' other than the query itself' if exclude_self else ''}), got {k}"
        )
    tile_width = _tile_width(block_size, corpus_block_size)
    indices = np.empty((n_queries, k), np.int64)
    scores = np.empty((n_queries, k), np.float32)
    for start, block, tiles in _tiles(queries, corpus, block_size, tile_width, positions):
        best_scores = best_ids = None
        for tile_start, tile in tiles:
            tile_scores, tile_ids = tile.topk(min(k, tile.shape[1]), dim=1)
            tile_ids += tile_start
            if best_scores is not None:
                tile_scores = torch.cat([best_scores, tile_scores], dim=1)
                tile_ids = torch.cat([best_ids, tile_ids], dim=1)
                tile_scores, picked = tile_scores.topk(min(k, tile_scores.shape[1]), dim=1)
                tile_ids = tile_ids.gather(1, picked)
            best_scores, best_ids = tile_scores, tile_ids
        block_ids, block_scores = _sorted(best_ids.numpy(), best_scores.numpy())
        indices[start : start + len(block)] = block_ids
        scores[start : start + len(block)] = block_scores
    return indices, scores


def neighbors_above(
    queries: np.ndarray,
    corpus: np.ndarray,
    threshold: float,
    block_size: int = 1024,
    exclude_self: bool = False,
    query_positions: np.ndarray | None = None,
    corpus_block_size: int | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every corpus row whose inner product with a query is at least ``threshold`` (fp32).

    Memory grows with the number of rows found, so use it where that number is bounded (a high
    threshold, or queries known to have few such neighbours).

    Args:
        threshold: compared in float32, as the scores are.
        Others: as for :func:`topk_neighbors`.

    Returns:
        Per query, ``(indices int64, scores float32)`` sorted by score descending, equal scores
        by index ascending.
    """
    queries, corpus = _check_shapes(queries, corpus, block_size, corpus_block_size)
    positions = _self_positions(len(queries), len(corpus), exclude_self, query_positions)
    limit = torch.tensor(threshold, dtype=torch.float32)
    found: list[tuple[np.ndarray, np.ndarray]] = []
    tile_width = _tile_width(block_size, corpus_block_size)
    for _, block, tiles in _tiles(queries, corpus, block_size, tile_width, positions):
        rows, columns, values = [], [], []
        for tile_start, tile in tiles:
            row, column = (tile >= limit).nonzero(as_tuple=True)
            rows.append(row)
            columns.append(column + tile_start)
            values.append(tile[row, column])
        row = torch.cat(rows).numpy()
        column, value = torch.cat(columns).numpy(), torch.cat(values).numpy()
        order = np.lexsort((column, -value, row))  # by query, then score desc, then index
        row, column, value = row[order], column[order], value[order]
        bounds = np.searchsorted(row, np.arange(len(block) + 1))
        found.extend((column[lo:hi], value[lo:hi]) for lo, hi in pairwise(bounds))
    return found


def _check_shapes(queries, corpus, block_size: int, corpus_block_size: int | None):
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    corpus = np.ascontiguousarray(corpus, dtype=np.float32)
    if queries.ndim != 2 or corpus.ndim != 2 or queries.shape[1] != corpus.shape[1]:
        raise ValueError(
            f"queries and corpus must be 2-d with the same width, got {queries.shape} and "
            f"{corpus.shape}"
        )
    if block_size < 1 or (corpus_block_size is not None and corpus_block_size < 1):
        raise ValueError("block_size and corpus_block_size must be >= 1")
    return queries, corpus


def _tile_width(block_size: int, corpus_block_size: int | None) -> int:
    return corpus_block_size or max(block_size, _TILE_SCORES // block_size)


def _tiles(queries, corpus, block_size: int, tile_width: int, positions):
    """Yield ``(start, query block, tiles)``; ``tiles`` yields ``(corpus start, score tile)``
    with each query's own row (``positions``) set to -inf."""
    corpus_t = torch.from_numpy(corpus)  # from numpy: no autograd is involved
    for start in range(0, len(queries), block_size):
        block = torch.from_numpy(queries[start : start + block_size])
        own = None if positions is None else positions[start : start + block_size]
        yield start, block, _block_tiles(block, corpus_t, tile_width, own)


def _block_tiles(block: torch.Tensor, corpus: torch.Tensor, tile_width: int, own):
    rows = torch.arange(len(block))
    for start in range(0, len(corpus), tile_width):
        tile = block @ corpus[start : start + tile_width].T  # (b, c)
        if own is not None:
            local = torch.from_numpy(own) - start
            inside = (local >= 0) & (local < tile.shape[1])
            tile[rows[inside], local[inside]] = -torch.inf
        yield start, tile


def _sorted(ids: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row by score descending, equal scores by index ascending."""
    order = np.lexsort((ids, -scores), axis=1)
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)


def _self_positions(
    n_queries: int, n_corpus: int, exclude_self: bool, query_positions: np.ndarray | None
) -> np.ndarray | None:
    if not exclude_self:
        return None
    if query_positions is None:
        if n_queries > n_corpus:
            raise ValueError(
                "exclude_self without query_positions needs the queries to be the corpus or its "
                f"first rows, but there are {n_queries} queries and {n_corpus} corpus rows"
            )
        return np.arange(n_queries)
    positions = np.asarray(query_positions, dtype=np.int64)
    if positions.shape != (n_queries,):
        raise ValueError(f"query_positions must have shape ({n_queries},), got {positions.shape}")
    if n_queries and (positions.min() < 0 or positions.max() >= n_corpus):
        raise ValueError(f"query_positions must lie in [0, {n_corpus})")
    return positions
