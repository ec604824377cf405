"""The exact mode's incremental run: only NEW x (OLD + NEW) is searched; the rest is reused.

Given every current vector in id order, the OLD rows' ids (unchanged embeddings parts, see
:mod:`sbert_pipeline.pairs.incremental`) and the previous output, the result equals a from-scratch
exact run on the current rows:

- **Pairs** (``--threshold``): every previous pair whose two ends are OLD (their vectors did not
  change, so neither did their score), plus every pair of a NEW row with any row at or above
  the threshold (:func:`sbert_pipeline.vectors.new_rows.search_rows`).
- **Top-k lists.** A NEW row is searched against all rows. An OLD row whose previous list holds
  only OLD rows and is ``k`` long kept its exact top-k among the OLD rows (they are a subset of
  the previous rows, and its list is their best); its new list is that list merged with the
  NEW rows at or above its k-th score (score descending, equal scores by id, first ``k``). An
  OLD row whose list named a GONE row (removed or changed), or was short, is searched again
  against all rows.

Scores: every score is the one final score (:mod:`sbert_pipeline.vectors.exact_scores`) of the full
search, so they are the same bits whichever run found a pair, and membership at the threshold
and list order do not depend on the path. Stored scores are clamped to [-1, 1]
(:func:`sbert_pipeline.vectors.cosine_range.clamp_cosines`), which can only merge scores past 1 or
-1; the previous list entries stored at exactly 1 or -1 are therefore scored again from the
vectors before they are compared with new rows, so ties among exact duplicates order as in the
full search.

The outputs are read as Arrow columns and numpy arrays (no Python object per row), and the
shards are the full run's: one per query range in id order (:func:`plan_ranges`).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.io.pairs_output import read_pairs
from sbert_pipeline.io.previous_output import incremental_record
from sbert_pipeline.pairs.defaults import ROWS_PER_RANGE
from sbert_pipeline.pairs.exact_search import plan_ranges, write_ranges
from sbert_pipeline.pairs.incremental import Reuse, positions_in, previous_lists
from sbert_pipeline.pairs.settings import PairsSettings
from sbert_pipeline.vectors.block_search import BlockResult
from sbert_pipeline.vectors.new_rows import search_rows
from sbert_pipeline.vectors.tile_topk import final_scores


def run_exact_incremental(
    settings: PairsSettings,
    ids: pa.Array,
    vectors: np.ndarray,
    reuse: Reuse,
    previous_dir: str,
    ranges: int | None,
) -> dict:
    """Write the exact outputs of ``ids``/``vectors`` (ascending ids) reusing the previous
    output in ``previous_dir``; returns the manifest's ``incremental`` section."""
    start = time.perf_counter()
    k, n = settings.k, len(ids)
    old = pc.is_in(ids, value_set=reuse.old_ids).to_numpy(zero_copy_only=False)
    lists = _previous_lists(ids, vectors, reuse.old_ids, previous_dir, k)
    good = lists.rows[~lists.research]
    floors = np.full(n, np.inf, np.float32)
    floors[good] = lists.scores[~lists.research, -1]
    queries = np.union1d(np.flatnonzero(~old), lists.rows[lists.research])
    found = search_rows(vectors, queries, k, new=~old, threshold=settings.threshold, floors=floors)
    indices = np.zeros((n, k), np.int64)
    scores = np.zeros((n, k), np.float32)
    indices[good] = lists.indices[~lists.research]
    scores[good] = lists.scores[~lists.research]
    updated = _merge_insertions(indices, scores, found)
    indices[queries] = found.indices
    scores[queries] = found.scores
    kept_a, kept_b, kept_s = _kept_pairs(ids, reuse.old_ids, previous_dir, settings.threshold)
    a = np.concatenate([kept_a, found.pair_a])
    b = np.concatenate([kept_b, found.pair_b])
    s = np.concatenate([kept_s, found.pair_scores])
    order = np.lexsort((b, a))
    result = BlockResult(indices, scores, a[order], b[order], s[order])
    planned = plan_ranges(n, ranges or math.ceil(n / ROWS_PER_RANGE))
    for _ in write_ranges(settings, ids, result, planned):
        pass
    record = incremental_record(
        reuse.previous,
        rows=(reuse.rows_old, reuse.rows_new, reuse.rows_gone),
        reused=["neighbors of OLD rows", "pairs of two OLD rows"],
        recomputed=["NEW x (OLD + NEW) exact search", "lists of OLD rows that lost a neighbour"],
        seconds=time.perf_counter() - start,
    )
    return {
        **record,
        "pairs_kept": len(kept_a),
        "pairs_added": len(found.pair_a),
        "lists_searched": len(queries),
        "lists_researched": int(lists.research.sum()),
        "lists_updated": updated,
        "ranges": len(planned),
    }


class _Lists:
    """The previous lists of the OLD rows, as positions into the current rows.

    ``rows`` (m,) current positions; ``indices``/``scores`` (m, k) their lists (valid where
    ``research`` is False); ``research`` (m,) lists that named a GONE row or were short.
    """

    def __init__(self, rows, indices, scores, research) -> None:
        self.rows, self.indices, self.scores, self.research = rows, indices, scores, research


def _previous_lists(
    ids: pa.Array, vectors: np.ndarray, old_ids: pa.Array, previous_dir: str, k: int
) -> _Lists:
    table = previous_lists(previous_dir, old_ids)
    rows = positions_in(table["id"], ids)
    neighbor_ids, stored = (_array(table, name) for name in ("neighbor_ids", "scores"))
    lengths = pc.list_value_length(neighbor_ids).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(neighbor_ids)
    flat_scores = pc.list_flatten(stored).to_numpy(zero_copy_only=False).astype(np.float32)
    parents = pc.list_parent_indices(neighbor_ids).to_numpy(zero_copy_only=False)
    alive = pc.is_in(flat, value_set=old_ids).to_numpy(zero_copy_only=False)
    research = lengths != k
    research[np.unique(parents[~alive])] = True
    keep = ~research[parents]
    positions = np.full(len(flat), -1, np.int64)
    positions[keep] = positions_in(flat.filter(pa.array(keep)), ids)
    # Clamped at +-1: the stored score may stand for 1.0000001; score those again (see above).
    edge = keep & (np.abs(flat_scores) >= 1.0)
    flat_scores[edge] = final_scores(vectors, rows[parents[edge]], positions[edge])
    indices = np.zeros((len(rows), k), np.int64)
    scores = np.zeros((len(rows), k), np.float32)
    good = np.flatnonzero(~research)
    if len(good):
        indices[good] = positions[keep].reshape(-1, k)
        scores[good] = flat_scores[keep].reshape(-1, k)
        # Re-scored edges can reorder a list's ties at +-1: the full search's order.
        order = np.lexsort((indices[good], -scores[good]), axis=-1)
        indices[good] = np.take_along_axis(indices[good], order, axis=1)
        scores[good] = np.take_along_axis(scores[good], order, axis=1)
    return _Lists(rows, indices, scores, research)


def _merge_insertions(indices: np.ndarray, scores: np.ndarray, found) -> int:
    """Merge the NEW rows that reach an OLD row's floor into its list (score descending, ties by
    position, first ``k``); returns the number of lists that changed."""
    if not len(found.insert_row):
        return 0
    k = indices.shape[1]
    touched = np.unique(found.insert_row)
    row = np.concatenate([np.repeat(touched, k), found.insert_row])
    neighbor = np.concatenate([indices[touched].reshape(-1), found.insert_neighbor])
    score = np.concatenate([scores[touched].reshape(-1), found.insert_score])
    order = np.lexsort((neighbor, -score, row))
    row, neighbor, score = row[order], neighbor[order], score[order]
    starts = np.searchsorted(row, touched)
    picks = (starts[:, None] + np.arange(k)).reshape(-1)
    indices[touched] = neighbor[picks].reshape(-1, k)
    scores[touched] = score[picks].reshape(-1, k)
    return len(touched)


def _kept_pairs(
    ids: pa.Array, old_ids: pa.Array, previous_dir: str, threshold: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The previous pairs whose two ends are OLD, as positions ``a < b`` into ``ids``."""
    if threshold is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    table = read_pairs(previous_dir).combine_chunks()
    both = pc.and_(
        pc.is_in(table["id_a"], value_set=old_ids), pc.is_in(table["id_b"], value_set=old_ids)
    )
    table = table.filter(both)
    scores = _array(table, "score").to_numpy(zero_copy_only=False).astype(np.float32)
    return positions_in(table["id_a"], ids), positions_in(table["id_b"], ids), scores


def _array(table: pa.Table, name: str) -> pa.Array:
    """One column as one array (an empty table has no chunks)."""
    column = table[name]
    return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
