"""The exact top-k of some rows from one fp32 tile of their scores against every row (Beam-free).

Shared by the dense fallback of :func:`sbert_pipeline.vectors.allpairs.self_topk` and the search of
new rows against all rows (:mod:`sbert_pipeline.vectors.new_rows`): both hold an ``(r, n)`` fp32
tile, rescore every pair within the fp32 error margin of each row's k-th candidate score with
the one final scoring function (:mod:`sbert_pipeline.vectors.exact_scores`), and keep the top k by
final score, ties by the smaller column.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sbert_pipeline.vectors.exact_scores import pair_scores_into

# Candidates per row taken from the tile beyond k before the margin test.
_EXTRA = 32


@dataclass(frozen=True)
class TileTopk:
    """The exact top-k of a tile's rows (:func:`tile_topk`) and how many pairs were rescored."""

    indices: np.ndarray  # (r, k) int64 columns, score descending, equal scores by column
    scores: np.ndarray  # (r, k) float32 final scores
    rescored: int


def tile_topk(
    data: torch.Tensor, rows: torch.Tensor, tile: torch.Tensor, k: int, margins: torch.Tensor
) -> TileTopk:
    """The exact top-``k`` of ``rows`` from ``tile``, their fp32 scores against every row.

    Args:
        data: ``(n, d)`` float32 vectors.
        rows: ``(r,)`` int64, the rows of the tile.
        tile: ``(r, n)`` fp32 candidate scores, each row's own column at ``-inf``.
        k: neighbours per row, at most ``n - 1``.
        margins: ``(r,)`` twice each row's bound on candidate minus final score: every pair
            within it of the row's k-th candidate score is rescored, so the answer is the
            top-k by final score, ties by the smaller column.
    """
    # The best few per row usually hold every candidate within the margin: a row is read once
    # by topk, and only rows where they do not (many near-ties) are compared in full.
    width = min(k + _EXTRA, tile.shape[1] - 1)
    values, columns = tile.topk(width, dim=1)
    limit = values[:, k - 1] - margins
    listed = values >= limit[:, None]
    # Rows whose width-th candidate is within the margin may have more beyond it (unless the
    # candidates are all the other columns).
    short = (values[:, -1] >= limit).nonzero().reshape(-1)
    if width == tile.shape[1] - 1:
        short = short[:0]
    listed[short] = False
    row, place = listed.nonzero(as_tuple=True)
    column = columns[row, place]
    if len(short):
        again_row, again_column = (tile[short] >= limit[short][:, None]).nonzero(as_tuple=True)
        row = torch.cat([row, short[again_row]])
        column = torch.cat([column, again_column])
    row, column = row.numpy(), column.numpy()
    final = final_scores(data.numpy(), rows.numpy()[row], column)
    # Sort all found pairs by (row, score desc, column) and keep the first k of each row.
    order = np.lexsort((column, -final, row))
    bounds = np.searchsorted(row[order], np.arange(len(rows)))
    picks = (bounds[:, None] + np.arange(k)).ravel()
    return TileTopk(
        column[order][picks].reshape(-1, k), final[order][picks].reshape(-1, k), len(row)
    )


def final_scores(data: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The final scores of the pairs ``(a[i], b[i])`` of ``data`` (float32)."""
    out = np.empty(len(a), dtype=np.float32)
    pair_scores_into(
        data, np.ascontiguousarray(a, np.int64), np.ascontiguousarray(b, np.int64), out
    )
    return out
