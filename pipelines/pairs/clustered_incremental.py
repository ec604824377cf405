"""The clustered mode's incremental run: new rows join the previous run's blocks.

The previous run's centroids (``centroids.npy``) and ``nprobe`` are kept: every current row
belongs to the blocks of its ``nprobe`` nearest centroids, as in the previous run, so the OLD
rows' blocks are the ones their lists came from, less the GONE rows, plus the NEW rows that
joined them. Only blocks holding a NEW row (or an OLD row whose list must be searched again)
are searched, and in them only those rows' scores against the members:

- a NEW row's list is its top-k among the members of its blocks;
- an OLD row's previous list (all of it OLD rows) is merged with the NEW rows of its blocks that
  reach its k-th score (any NEW row where the list was short); an OLD row whose list named a
  GONE row is searched again in its blocks;
- pairs: the previous pairs of two OLD rows, and every pair of a NEW row with a member of one
  of its blocks at or above the threshold.

The result is the clustered run with the previous centroids on the current rows (not a refit):
the lists are approximate as before, so the recall check samples queries among the NEW rows as
well as among all rows, against exact search, and the manifest reports both. Blocks grown past
``--max-block`` mean a full run (:func:`assign_blocks` tells).

Scores are final scores (:mod:`sbert_pipeline.vectors.exact_scores`); lists and pairs are merged by
the clustered mode's own rules (:mod:`sbert_pipeline.pairs.merge`: a neighbour once, score
descending, equal scores by id).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.io.centroids import CENTROIDS, load_centroids, save_centroids
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.io.pairs_output import NEIGHBORS, PAIRS, read_pairs
from sbert_pipeline.io.previous_output import incremental_record
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from sbert_pipeline.pairs.defaults import ROWS_PER_SHARD
from sbert_pipeline.pairs.incremental import Reuse, positions_in, previous_lists
from sbert_pipeline.pairs.merge import merge_neighbors, merge_pairs
from sbert_pipeline.pairs.output_tables import part_path
from sbert_pipeline.pairs.settings import PairsSettings, write_parquet
from sbert_pipeline.vectors.block_plan import nearest_centroids
from sbert_pipeline.vectors.cosine_range import clamp_cosines
from sbert_pipeline.vectors.exact_truth import recall_at_k
from sbert_pipeline.vectors.new_rows import concat_columns, search_rows
from sbert_pipeline.vectors.tile_topk import final_scores


def assign_blocks(
    previous_dir: str, previous: dict, ids: pa.Array, vectors: np.ndarray, old_ids: pa.Array
) -> tuple[np.ndarray, np.ndarray] | str:
    """The previous centroids and every row's ``nprobe`` blocks, ``(centroids, (n, nprobe))``,
    or why the run is a full one (no centroids, or a block of a NEW row past ``--max-block``)."""
    new = ~pc.is_in(ids, value_set=old_ids).to_numpy(zero_copy_only=False)
    section = previous.get("clustered") or {}
    nprobe, max_block = section.get("nprobe"), section.get("max_block")
    if not nprobe or not max_block:
        return "the previous clustered output records no nprobe or max_block"
    centroids = load_centroids(join(previous_dir, CENTROIDS))
    if centroids.shape[1] != vectors.shape[1]:
        return "the previous centroids have another dimension"
    probes = nearest_centroids(vectors, centroids, nprobe)
    sizes = np.bincount(probes.reshape(-1), minlength=len(centroids))
    grown = np.unique(probes[new].reshape(-1))
    over = grown[sizes[grown] > max_block]
    if len(over):
        return (
            f"{len(over)} block(s) with new rows grew past --max-block {max_block} "
            f"(largest {int(sizes[over].max())})"
        )
    return centroids, probes


def run_clustered_incremental(
    settings: PairsSettings,
    ids: pa.Array,
    vectors: np.ndarray,
    reuse: Reuse,
    previous_dir: str,
    blocks: tuple[np.ndarray, np.ndarray],
    *,
    recall_sample: int,
    seed: int,
    shards: int | None,
) -> tuple[dict, dict, float | None]:
    """Write the clustered outputs of ``ids``/``vectors`` (ascending ids) reusing the previous
    output; returns ``(incremental section, clustered details, recall on all rows or None)``."""
    start = time.perf_counter()
    k, n = settings.k, len(ids)
    centroids, probes = blocks
    save_centroids(join(settings.output, CENTROIDS), centroids)
    old = pc.is_in(ids, value_set=reuse.old_ids).to_numpy(zero_copy_only=False)
    previous = previous_lists(previous_dir, reuse.old_ids)
    intact, floors = _intact_lists(previous, ids, reuse.old_ids, k)
    research = old.copy()
    research[positions_in(previous["id"], ids)[intact]] = False
    found = _search_blocks(vectors, probes, ~old, research, floors, k, settings.threshold)
    rows, neighbors, scores = found["lists"]
    candidates = _lists_table(ids, rows, neighbors, scores, np.flatnonzero(~old | research))
    table = merge_neighbors([previous.filter(pa.array(intact)), candidates], k)
    count = shards or math.ceil(n / ROWS_PER_SHARD)
    _write_slices(settings.output, NEIGHBORS, table, count, NEIGHBORS_SCHEMA)
    added = kept = 0
    if settings.threshold is not None:
        kept_pairs = read_pairs(previous_dir).combine_chunks()
        both = pc.and_(
            pc.is_in(kept_pairs["id_a"], value_set=reuse.old_ids),
            pc.is_in(kept_pairs["id_b"], value_set=reuse.old_ids),
        )
        kept_pairs = kept_pairs.filter(both)
        a, b, s = found["pairs"]
        new_pairs = pa.table(
            {
                "id_a": ids.take(pa.array(a)),
                "id_b": ids.take(pa.array(b)),
                "score": clamp_cosines(s),
            }
        )
        merged = merge_pairs([kept_pairs, new_pairs])
        kept, added = kept_pairs.num_rows, merged.num_rows - kept_pairs.num_rows
        _write_slices(settings.output, PAIRS, merged, count, PAIRS_SCHEMA)
    lengths = pc.list_value_length(table["neighbor_ids"]).to_numpy(zero_copy_only=False)
    recall = _recall(table, ids, vectors, ~old, k, recall_sample, seed)
    record = incremental_record(
        reuse.previous,
        rows=(reuse.rows_old, reuse.rows_new, reuse.rows_gone),
        reused=["centroids and nprobe", "neighbors of OLD rows", "pairs of two OLD rows"],
        recomputed=[
            "NEW rows searched in their blocks",
            "OLD rows' lists merged with NEW rows of their blocks",
            "lists of OLD rows that lost a neighbour, searched in their blocks",
        ],
        seconds=time.perf_counter() - start,
    )
    section = {
        **record,
        "pairs_kept": kept,
        "pairs_added": added,
        "lists_searched": int(np.sum(~old | research)),
        "lists_researched": int(research.sum()),
        "lists_updated": found["updated"],
        "blocks_searched": found["blocks"],
        "recall": recall,
    }
    details = {
        **(reuse.previous.get("clustered") or {}),
        "centroids": "the previous run's (not refitted)",
        "output_shards": count,
        "short_lists": int(np.sum(lengths < k)),
    }
    return section, details, None if recall is None else recall["all_rows"]


def _intact_lists(
    previous: pa.Table, ids: pa.Array, old_ids: pa.Array, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Which previous OLD lists name only OLD rows, and every row's floor: the score a NEW row
    of its blocks must reach to enter its list (its k-th, -inf for a short list, +inf for rows
    whose list is not kept)."""
    lists = previous["neighbor_ids"].combine_chunks()
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    alive = pc.is_in(pc.list_flatten(lists), value_set=old_ids).to_numpy(zero_copy_only=False)
    intact = np.ones(previous.num_rows, bool)
    intact[parents[~alive]] = False
    lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
    flat_scores = pc.list_flatten(previous["scores"].combine_chunks()).to_numpy()
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    kth = np.full(previous.num_rows, -np.inf, np.float32)
    full = lengths >= k
    kth[full] = flat_scores[offsets[:-1][full] + k - 1]
    floors = np.full(len(ids), np.inf, np.float32)
    rows = positions_in(previous["id"], ids)
    floors[rows[intact]] = kth[intact]
    return intact, floors


def _search_blocks(vectors, probes, new, research, floors, k, threshold) -> dict:
    """Score the NEW and re-searched rows of every block against its members (final scores)."""
    n, nprobe = probes.shape
    flat = probes.reshape(-1)
    order = np.argsort(flat, kind="stable")
    members_of = np.repeat(np.arange(n), nprobe)[order]
    starts = np.flatnonzero(np.diff(flat[order], prepend=-1))
    ends = np.append(starts[1:], len(order))
    queries = new | research
    lists, pairs, inserts = [], [], []
    searched = 0
    for lo, hi in zip(starts, ends, strict=True):
        members = members_of[lo:hi]
        asking = members[queries[members]]
        if not len(asking):
            continue
        searched += 1
        q = np.repeat(asking, len(members))
        m = np.tile(members, len(asking))
        s = final_scores(vectors, q, m)
        s[q == m] = -np.inf
        lists.append(_top(q, m, s, k))
        fresh = new[q]
        if threshold is not None:
            hit = fresh & (s >= np.float32(threshold))
            pairs.append((np.minimum(q[hit], m[hit]), np.maximum(q[hit], m[hit]), s[hit]))
        reach = fresh & ~new[m] & (s >= floors[m])
        inserts.append((m[reach], q[reach], s[reach]))
    rows, neighbors, scores = concat_columns(lists + inserts)
    updated = len(np.unique(concat_columns(inserts)[0]))
    return {
        "lists": (rows, neighbors, scores),
        "pairs": concat_columns(pairs),
        "updated": updated,
        "blocks": searched,
    }


def _top(q: np.ndarray, m: np.ndarray, s: np.ndarray, k: int):
    """Each query's best ``k`` of one block (score descending, ties by position)."""
    order = np.lexsort((m, -s, q))
    q, m, s = q[order], m[order], s[order]
    first = np.searchsorted(q, q, side="left")
    keep = (np.arange(len(q)) - first < k) & np.isfinite(s)
    return q[keep], m[keep], s[keep]


def _lists_table(ids, rows, neighbors, scores, every: np.ndarray) -> pa.Table:
    """Candidate lists as a ``neighbors/`` table, one row per row of ``every`` (maybe empty)."""
    order = np.lexsort((neighbors, rows))
    rows, neighbors, scores = rows[order], neighbors[order], scores[order]
    counts = np.zeros(len(ids), np.int64)
    np.add.at(counts, rows, 1)
    listed = np.union1d(every, rows)
    offsets = np.concatenate([[0], np.cumsum(counts[listed])]).astype(np.int32)
    return pa.Table.from_arrays(
        [
            ids.take(pa.array(listed)),
            pa.ListArray.from_arrays(pa.array(offsets), ids.take(pa.array(neighbors))),
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(clamp_cosines(scores))),
        ],
        schema=NEIGHBORS_SCHEMA,
    )


def _write_slices(output: str, folder: str, table: pa.Table, count: int, schema) -> None:
    """``table`` in ``count`` contiguous shards (sorted tables: shards in id order)."""
    bounds = np.linspace(0, table.num_rows, count + 1).round().astype(int)
    for index in range(count):
        part = table.slice(bounds[index], bounds[index + 1] - bounds[index])
        write_parquet(part_path(output, folder, index, count), part, schema)


def _recall(table, ids, vectors, new, k, sample, seed) -> dict | None:
    """recall@k against exact search on ``sample`` queries: half among the NEW rows, half
    among all rows (the same definition as the full run's check)."""
    if sample == 0:
        return None
    rng = np.random.default_rng(seed)
    fresh = np.flatnonzero(new)
    picks = {
        "new_rows": rng.choice(fresh, min(len(fresh), max(1, sample // 2)), replace=False),
        "all_rows": rng.choice(
            len(ids), min(len(ids), max(1, sample - sample // 2)), replace=False
        ),
    }
    result = {}
    for name, rows in picks.items():
        rows = np.sort(rows)
        truth = search_rows(vectors, rows, k, new=np.zeros(len(ids), bool))
        wanted = ids.take(pa.array(rows))
        found = table.filter(pc.is_in(table["id"], value_set=wanted))
        lists = dict(zip(found["id"].to_pylist(), found["neighbor_ids"].to_pylist(), strict=True))
        values = dict(zip(found["id"].to_pylist(), found["scores"].to_pylist(), strict=True))
        names = wanted.to_pylist()
        result[name] = round(
            recall_at_k(
                [lists[i] for i in names],
                [ids.take(pa.array(row)).to_pylist() for row in truth.indices],
                k,
                found_scores=[values[i] for i in names],
                true_scores=truth.scores,
            ),
            6,
        )
    result["queries"] = {name: len(rows) for name, rows in picks.items()}
    return result
