"""Updating the previous k-means clustering instead of fitting again (``sbert cluster
--incremental``).

The previous version is the output folder's published manifest, ``centroids.npy`` and
``assignments/``. It is reused when it is a k-means clustering of the same embeddings folders,
made from vectors of the same model with the same fit settings (k, seed, sample, iterations,
refine passes). Its recorded embeddings manifests are compared with the current ones part by
part (:func:`sbert_pipeline.io.embeddings_versions.compare_versions`):

- OLD rows (parts with the same path and sha256: the same ids and vectors) keep their cluster
  and score, taken from the previous assignments by id as Arrow columns: the nearest stored
  centroid of the same vector, i.e. what assigning them again would give;
- NEW rows (every other current row) are assigned to the stored centroids here, shard by shard;
- GONE rows (previous rows outside the unchanged parts) are dropped with their parts.

The sizes, representatives, terms and the report are then recomputed from all assignments, as
in a full run. Communities have no centres new rows could join, ``--refit`` asks for a new fit,
and any other difference means a full run; the manifest's ``incremental`` section says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from sbert_pipeline.cluster.assign import (
    ASSIGNMENTS_SCHEMA,
    assign_shard,
    read_assignments,
    shard_name,
)
from sbert_pipeline.cluster.clustering import Clustering
from sbert_pipeline.cluster.options import Options
from sbert_pipeline.io.atomic import write_parquet_replacing
from sbert_pipeline.io.centroids import CENTROIDS, load_centroids, save_centroids
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.embeddings_versions import PartChanges, compare_versions
from sbert_pipeline.io.output_dir import CorruptOutputError, join, relative_to
from sbert_pipeline.io.previous_output import NOT_ASKED, model_change, previous_output

# What a k-means clustering recorded about its fit, kept by an incremental run.
FIT_DETAILS = ("fit", "sample", "iterations", "refine_passes", "refine_empty_clusters", "precision")


def fit_options(options: Options) -> dict:
    """The settings that made the centroids; an incremental run reuses them only when equal."""
    return {
        "k": options.k,
        "seed": options.seed,
        "sample": options.sample,
        "iterations": options.iterations,
        "refine_passes": options.refine_passes,
    }


@dataclass
class PreviousClustering:
    """A previous k-means clustering that the current embeddings can be assigned against."""

    manifest: dict
    centroids: np.ndarray  # (k, d) float32
    assignments: pa.Table  # id, cluster, score of every previous row
    changes: list[PartChanges]  # per input folder


def find_previous_clustering(
    options: Options, datasets: Sequence[EmbeddingsDataset]
) -> PreviousClustering | str:
    """The previous clustering to update, or why this run fits from scratch.

    Read before the stage prepares its output, so that what is reused is the published version.
    """
    if not options.incremental:
        return NOT_ASKED
    if options.method != "kmeans":
        return "communities have no centres that new rows could be assigned to"
    if options.refit:
        return "--refit: the centroids are fitted again on all rows"
    previous, why = previous_output(options.output, "clusters")
    if previous is None:
        return why
    if previous.get("method") != "kmeans":
        return f"the previous clustering used {previous.get('method')!r}, not k-means"
    if "fit_options" not in previous:
        return "the previous clustering records no fit_options (written before incremental runs)"
    if previous.get("fit_options") != fit_options(options):
        return (
            f"the k-means settings changed: {previous.get('fit_options')} -> {fit_options(options)}"
        )
    recorded = previous.get("embeddings", [])
    if [entry["directory"] for entry in recorded] != [d.directory for d in datasets]:
        return "the embeddings inputs are other folders than the previous clustering's"
    reason = model_change(recorded[0]["manifest"], datasets[0].manifest)
    if reason is not None:
        return reason
    changes = [
        compare_versions(entry["manifest"], dataset.manifest)
        for entry, dataset in zip(recorded, datasets, strict=True)
    ]
    if not any(change.reusable for change in changes):
        return "no embeddings part is unchanged since the previous clustering"
    centroids = load_centroids(join(options.output, CENTROIDS))
    if centroids.shape != (options.k, datasets[0].dim):
        return f"{CENTROIDS} holds {centroids.shape}, not ({options.k}, {datasets[0].dim})"
    return PreviousClustering(previous, centroids, read_assignments(options.output), changes)


def _ids_of(path: str) -> pa.ChunkedArray:
    with FileSystems.open(path) as handle:
        return pq.read_table(handle, columns=["id"]).column("id")


def assign_new_rows(
    previous: PreviousClustering,
    datasets: Sequence[EmbeddingsDataset],
    output: str,
    options: Options,
) -> tuple[Clustering, tuple[int, int, int]]:
    """Write ``centroids.npy`` and ``assignments/`` (one shard per embeddings shard, as a full
    run writes them) under ``output``: OLD rows copied, NEW rows assigned.

    Returns:
        The clustering of every current row, and the rows (old, new, gone).

    Raises:
        CorruptOutputError: the previous assignments lack ids of an unchanged part.
    """
    shards = [
        (path, relative_to(dataset.directory, path) in change.unchanged)
        for dataset, change in zip(datasets, previous.changes, strict=True)
        for path in dataset.shards
    ]
    # One hash lookup for all unchanged parts (the previous ids hashed once, not per part).
    kept_ids = [_ids_of(path) for path, unchanged in shards if unchanged]
    kept = pa.chunked_array([c for ids in kept_ids for c in ids.chunks], pa.string())
    rows = pc.index_in(kept, value_set=previous.assignments.column("id"))
    if rows.null_count:
        raise CorruptOutputError(
            f"{output}: the previous assignments lack {rows.null_count} ids of parts unchanged "
            "since; rerun the cluster stage with --refit"
        )
    old_rows = previous.assignments.take(rows)
    tables = []
    old = new = 0
    for index, (path, unchanged) in enumerate(shards):
        if unchanged:
            count = len(kept_ids.pop(0))
            table = old_rows.slice(old, count)
            old += count
        else:
            parts = list(assign_shard(path, previous.centroids, precision=options.precision))
            table = pa.concat_tables(parts) if parts else ASSIGNMENTS_SCHEMA.empty_table()
            new += table.num_rows
        write_parquet_replacing(shard_name(output, index, len(shards)), [table], ASSIGNMENTS_SCHEMA)
        tables.append(table)
    save_centroids(join(output, CENTROIDS), previous.centroids)
    every = pa.concat_tables(tables) if tables else ASSIGNMENTS_SCHEMA.empty_table()
    details = {key: previous.manifest[key] for key in FIT_DETAILS if key in previous.manifest}
    clustering = Clustering(
        ids=every.column("id").to_pylist(),
        labels=every.column("cluster").to_numpy().astype(np.int64),
        scores=every.column("score").to_numpy(zero_copy_only=False).astype(np.float32),
        n_clusters=len(previous.centroids),
        details=details,
    )
    return clustering, (old, new, previous.assignments.num_rows - old)
