"""Updating the previous index in place of a full build (``sbert index --incremental``).

The previous version is the index folder's published manifest and files. It is reused when it
was built from vectors of the same model with the same settings (factory or the budget's plan,
metric, target recall, training sample) and without ``--shards``; the embeddings manifest it
recorded is compared with the current one part by part
(:func:`sbert_pipeline.io.embeddings_versions.compare_versions`):

- OLD rows (parts with the same path and sha256) keep their place in the index;
- GONE rows (ids of the previous version outside the unchanged parts) are removed with
  ``remove_ids``, which Flat and IVF indexes support and HNSW does not (HNSW with GONE rows is a
  full build);
- NEW rows (every other current row) are added to the trained index; nothing is retrained.

Positions in ``ids.parquet`` are the index's ids, so removal renumbers: the kept rows get
positions 0..K-1 in their previous order (a Flat index shifts its vectors that way itself; an
IVF index keeps its stored ids, which are rewritten list by list), then the new rows follow,
with the held-out queries last as in a full build.

Recall is measured as a full build measures it, on the updated index: up to ``--queries`` NEW
rows (at most :data:`CHECK_QUERIES`) are held out, the index (OLD + the other NEW rows) is
searched at the previous search parameter, and the answers are compared with exact search over
the same rows. A recall below the target re-tunes the parameter (as the build tuned it); when
that needs more than :data:`MAX_RETUNE_FACTOR` times the previous value, or the target is out of
reach, the stage retrains (a full build) and records why. When no row is new the previous
measurement stands (removals take no true neighbour's place in the probed lists). The new
rows' vectors are held in memory while the index is updated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from sbert_pipeline.index.build import BuiltIndex
from sbert_pipeline.index.faiss_ops import prepare_vectors
from sbert_pipeline.index.files import IDS_FILE, id_batches, in_index_order, open_index
from sbert_pipeline.index.options import Options
from sbert_pipeline.index.planner import IndexPlan
from sbert_pipeline.index.tuning import (
    RECALL_K,
    SearchTuning,
    queries_per_second,
    search_parameter,
    tune_search_parameter,
)
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.embeddings_versions import PartChanges, compare_versions, unchanged_row_mask
from sbert_pipeline.io.output_dir import join, relative_to
from sbert_pipeline.io.previous_output import NOT_ASKED, model_change, previous_output
from sbert_pipeline.io.resources import AUTO
from sbert_pipeline.vectors.exact_truth import ExactTopK, recall_at_k

logger = logging.getLogger(__name__)

# Held-out new rows the recall check uses at most: the exact answer costs queries x N x d,
# and 200 queries (2,000 neighbours) put the standard error of a recall of 0.95 near 0.005.
CHECK_QUERIES = 200
# How far the search parameter may be raised before the trained index counts as outgrown.
MAX_RETUNE_FACTOR = 2


@dataclass
class PreviousIndex:
    """A previous index version that can be updated with the current embeddings."""

    manifest: dict
    index: faiss.Index
    ids: pa.Table  # ids.parquet, in position order
    changes: PartChanges
    old_rows: np.ndarray  # (N,) bool per current row: in an unchanged part
    gone: np.ndarray  # sorted previous positions to remove


@dataclass
class UpdatedIndex:
    """The updated index, ready to be written, and what the manifest says about it."""

    built: BuiltIndex
    id_batches: list[tuple[list[str], list[str] | None]]  # in position order
    recall_method: str
    rows: tuple[int, int, int]  # old, new, gone


def removable(index: faiss.Index) -> bool:
    """Whether ``remove_ids`` works on ``index`` and keeps positions renumberable: a Flat
    index, or an IVF index whose lists are in memory (HNSW graphs cannot drop nodes)."""
    if isinstance(index, faiss.IndexPreTransform):
        index = faiss.downcast_index(index.index)
    if isinstance(index, faiss.IndexFlat):
        return True
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None or ivf.direct_map.type != faiss.DirectMap.NoMap:
        return False
    return isinstance(faiss.downcast_InvertedLists(ivf.invlists), faiss.ArrayInvertedLists)


def remove_positions(index: faiss.Index, positions: np.ndarray) -> None:
    """Remove the vectors at ``positions`` and renumber the rest 0..K-1 in their order.

    A Flat index shifts the kept vectors down itself; an IVF index keeps each vector's stored
    id, so the ids of every list are rewritten through the old -> new position map.
    """
    if positions.size == 0:
        return
    total = int(index.ntotal)
    removed = index.remove_ids(faiss.IDSelectorBatch(positions.astype(np.int64)))
    if removed != positions.size:
        raise ValueError(f"removed {removed} of {positions.size} vectors from the index")
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is None:
        return
    kept = np.ones(total, dtype=bool)
    kept[positions] = False
    new_position = np.cumsum(kept, dtype=np.int64) - 1
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    for list_no in range(ivf.nlist):
        size = lists.list_size(list_no)
        if size:
            # A view of the list's ids (ArrayInvertedLists keeps them in one std::vector).
            ids = faiss.rev_swig_ptr(lists.get_ids(list_no), size)
            ids[:] = new_position[ids]


def manifest_tried(manifest: dict) -> tuple[tuple[int, float], ...]:
    """The ``(value, recall@10)`` pairs the previous build tried."""
    return tuple((int(t["value"]), float(t["recall_at_10"])) for t in manifest.get("tuning", []))


def recheck_recall(
    index: faiss.Index, queries: np.ndarray, truth: np.ndarray, previous: SearchTuning
) -> SearchTuning | str:
    """Recall@10 of the updated ``index`` at the previous search parameter; re-tuned when it
    misses the target by a little; or why the index must be retrained.

    The build tunes to the smallest value reaching the target, so fresh queries land just
    below it about half the time; a value up to :data:`MAX_RETUNE_FACTOR` times the previous
    one keeps the trained index (searches at most that much slower), a larger one retrains.
    """
    target = previous.target
    _, found = index.search(queries, RECALL_K)
    recall = recall_at_k(found, truth, RECALL_K)
    where = f"on {len(queries)} held-out new rows"
    if previous.parameter is None:
        if recall >= target:
            return SearchTuning(None, None, recall, target)
        return f"recall@10 {recall:.4f} {where} is below the target {target}; retraining"
    name, value = previous.parameter, int(previous.value)
    if recall >= target:
        return SearchTuning(name, value, recall, target, ((value, recall),))
    tuned = tune_search_parameter(index, queries, truth, target)
    if tuned.reached and tuned.value <= MAX_RETUNE_FACTOR * value:
        return tuned
    missed = (
        f"recall@10 {recall:.4f} {where} at the previous {name} {value} is below the "
        f"target {target}"
    )
    if not tuned.reached:
        return (
            f"{missed}, even at the largest {name} {tuned.value} ({tuned.recall:.4f}); retraining"
        )
    return (
        f"{missed}, and reaching it needs {name} {tuned.value} (recall {tuned.recall:.4f}), "
        f"more than {MAX_RETUNE_FACTOR}x the previous value; retraining"
    )


def _settings_change(options: Options, plan: IndexPlan | None, previous: dict) -> str | None:
    """Why the previous index was built differently from what ``options`` ask, or None."""
    if options.shards is not None or previous.get("shards") is not None:
        return "a sharded index is not updated in place (--shards)"
    asked = {
        "factory_requested": options.factory,
        "metric": options.metric,
        "target_recall": options.target_recall,
        "train_sample_requested": options.train_sample,
    }
    # ``auto`` follows the memory free at each run; the plan check below covers it.
    if options.factory == "auto" and options.memory_budget.strip().lower() != AUTO:
        asked["memory_budget_bytes"] = options.memory_budget_bytes()
    for name, value in asked.items():
        if previous.get(name) != value:
            return f"{name} changed: {previous.get(name)!r} -> {value!r}"
    if plan is not None:
        fitting = {c.factory for c in plan.considered if plan.fits(c)}
        if previous.get("factory") not in fitting:
            return (
                f"the previous index {previous.get('factory')} is not among the indexes the "
                f"budget plans for {plan.n} vectors ({', '.join(sorted(fitting))})"
            )
    return None


def _ids_of(shards: list[str]) -> pa.ChunkedArray:
    """The ``id`` column of embeddings shards, in order (no vector is read)."""
    columns = []
    for path in shards:
        with FileSystems.open(path) as handle:
            columns.extend(pq.read_table(handle, columns=["id"]).column("id").chunks)
    return pa.chunked_array(columns, pa.string())


def find_previous_index(
    options: Options, data: EmbeddingsDataset, plan: IndexPlan | None
) -> PreviousIndex | str:
    """The previous index to update, or why the run is a full build.

    Read before the stage prepares its output, so that what is reused is the published version.
    """
    if not options.incremental:
        return NOT_ASKED
    previous, why = previous_output(options.output, "index")
    if previous is None:
        return why
    recorded = previous.get("embeddings", {}).get("manifest", {})
    reason = model_change(recorded, data.manifest) or _settings_change(options, plan, previous)
    if reason is not None:
        return reason
    if previous.get("has_text") != data.has_text:
        return "the embeddings gained or lost their text column"
    changes = compare_versions(recorded, data.manifest)
    if not changes.reusable:
        return "no embeddings part is unchanged since the previous index"
    # read_manifest checked every listed file's digest already (unless --no-verify).
    loaded = open_index(options.output, verify_checksums=False)
    with FileSystems.open(join(options.output, IDS_FILE)) as handle:
        ids = pq.read_table(handle)
    unchanged = [p for p in data.shards if relative_to(data.directory, p) in changes.unchanged]
    kept = pc.is_in(ids.column("id"), value_set=_ids_of(unchanged)).to_numpy(zero_copy_only=False)
    gone = np.flatnonzero(~kept)
    if gone.size and not removable(loaded.index):
        return (
            f"{previous['factory']} cannot remove vectors, and {gone.size} previous rows are "
            "gone or changed"
        )
    old_rows = unchanged_row_mask(data, changes)
    if int(kept.sum()) != int(old_rows.sum()):
        return (
            f"the previous index holds {int(kept.sum())} rows of the unchanged parts, which "
            f"hold {int(old_rows.sum())}: the index does not match its recorded embeddings"
        )
    return PreviousIndex(previous, loaded.index, ids, changes, old_rows, gone)


def _sub_dataset(data: EmbeddingsDataset, parts: frozenset[str]) -> EmbeddingsDataset:
    """``data`` restricted to the shards named (relative paths), in its order."""
    shards = tuple(p for p in data.shards if relative_to(data.directory, p) in parts)
    return replace(data, shards=shards)


def update_index(
    previous: PreviousIndex, data: EmbeddingsDataset, options: Options
) -> UpdatedIndex | str:
    """Remove GONE rows, add NEW ones, measure recall; or why a full build is needed instead."""
    start = time.perf_counter()
    manifest, index, metric = previous.manifest, previous.index, options.metric
    new_data = _sub_dataset(data, previous.changes.new)
    new_ids, new_vectors = new_data.load()
    new_vectors = prepare_vectors(new_vectors, metric)
    rng = np.random.default_rng(options.seed)
    n_queries = min(options.queries, CHECK_QUERIES, len(new_ids))
    held_out = np.sort(rng.choice(len(new_ids), size=n_queries, replace=False))
    added = np.ones(len(new_ids), dtype=bool)
    added[held_out] = False

    remove_positions(index, previous.gone)
    kept = np.ones(previous.ids.num_rows, dtype=bool)
    kept[previous.gone] = False
    kept_rows = previous.ids.filter(pa.array(kept))
    kept_ids = kept_rows.column("id")
    n_kept = int(index.ntotal)
    index.add(new_vectors[added])
    seconds = {"update": time.perf_counter() - start}

    parameter = search_parameter(index)
    name = parameter[0] if parameter else None
    value = manifest["search_params"].get(name) if name else None
    recall = manifest.get("recall_at_10", 1.0)
    tuning = SearchTuning(name, value, recall, options.target_recall, manifest_tried(manifest))
    qps = manifest.get("queries_per_s")
    method = "no new rows: the previous measurement stands (rows were only removed)"
    if n_queries:
        measured = time.perf_counter()
        queries = new_vectors[held_out]
        truth = _exact_truth(index, queries, previous, data, kept_ids, new_vectors[added], metric)
        tuning = recheck_recall(index, queries, truth, tuning)
        if isinstance(tuning, str):
            return tuning
        qps = queries_per_second(index, queries, RECALL_K)
        method = "held-out new rows (indexed last) vs exact search over the updated index"
        seconds["recall"] = time.perf_counter() - measured
        index.add(queries)
    built = BuiltIndex(
        index=index,
        factory=manifest["factory"],
        metric=metric,
        tuning=tuning,
        queries_per_s=float(qps or 0.0),
        n_queries=n_queries,
        train_sample=manifest["train_sample"],
        device="cpu",
        held_out=held_out,
        seconds=seconds,
    )
    texts = kept_rows.column("text").to_pylist() if data.has_text else None
    batches = [(kept_ids.to_pylist(), texts)]
    batches.extend(in_index_order(id_batches(new_data, data.has_text), held_out))
    rows = (n_kept, len(new_ids), previous.gone.size)
    return UpdatedIndex(built, batches, method, rows)


def stored_vectors(
    index: faiss.IndexIVFFlat, block_rows: int = 65536
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(positions, vectors)`` blocks of what an IVF-Flat index stores, list after list.

    Its lists hold the vectors as they were added (float32 codes): a copy, no reconstruction
    error; the positions are the index's ids (0..ntotal-1, as :func:`remove_positions` keeps
    them). Lists are read in place and joined into blocks of about ``block_rows`` rows.
    """
    lists = faiss.downcast_InvertedLists(index.invlists)
    ids, codes, rows = [], [], 0
    for list_no in range(index.nlist):
        size = lists.list_size(list_no)
        if size:
            ids.append(faiss.rev_swig_ptr(lists.get_ids(list_no), size))
            codes.append(faiss.rev_swig_ptr(lists.get_codes(list_no), size * index.code_size))
            rows += size
        if rows >= block_rows or (list_no == index.nlist - 1 and rows):
            vectors = np.concatenate(codes).view(np.float32).reshape(rows, index.d)
            yield np.concatenate(ids).astype(np.int64), vectors
            ids, codes, rows = [], [], 0


def _exact_truth(
    index: faiss.Index,
    queries: np.ndarray,
    previous: PreviousIndex,
    data: EmbeddingsDataset,
    kept_ids: pa.ChunkedArray,
    added: np.ndarray,
    metric: str,
) -> np.ndarray:
    """The queries' exact top-10 over the updated index's rows, as index positions.

    An index that stores the vectors as they are (Flat, IVF-Flat) gives them back, with no
    vector read again (a Flat index's own answer is the exact one). Otherwise the OLD rows are
    streamed from their shards (current row order) and mapped to their index positions by id;
    the added NEW rows follow them in the index.
    """
    # FAISS 1.15 searches fewer than 128,000 queries without BLAS (distance_compute_blas_
    # threshold); the torch kernel multiplies through BLAS, 5x faster for 200 queries x 200k.
    kernel = "torch" if metric == "ip" else "faiss"
    exact = ExactTopK(queries, RECALL_K, metric=metric, kernel=kernel)
    if isinstance(index, faiss.IndexFlat):
        return index.search(queries, RECALL_K)[1]
    if isinstance(faiss.downcast_index(index), faiss.IndexIVFFlat):
        order = []
        for positions, vectors in stored_vectors(faiss.downcast_index(index)):
            exact.add(vectors)
            order.append(positions)
        return _positions(exact, np.concatenate(order))
    old_data = _sub_dataset(data, previous.changes.unchanged)
    ids = []
    for batch_ids, vectors in old_data.batches():
        exact.add(prepare_vectors(vectors, metric))
        ids.extend(batch_ids)
    exact.add(added)
    old = pc.index_in(pa.array(ids, pa.string()), value_set=kept_ids).to_numpy(zero_copy_only=False)
    order = np.concatenate([old, len(kept_ids) + np.arange(len(added))]).astype(np.int64)
    return _positions(exact, order)


def _positions(exact: ExactTopK, order: np.ndarray) -> np.ndarray:
    """The exact answer as index positions: ``order`` maps the rows in the order they were added
    to ``exact`` to their positions; -1 (fewer than k rows) stays -1."""
    _, truth = exact.result()
    return np.where(truth >= 0, order[np.maximum(truth, 0)], -1)
