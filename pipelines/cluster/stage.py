"""The cluster stage: topics of embeddings by spherical k-means, or communities.

Run from Python as ``cluster.run(cluster.Options(embeddings=[...], output=..., k=K))``,
or with the command ``sbert cluster`` (its ``--help`` lists the options).

kmeans: cosine k-means fitted in this process on a random sample (default 64 rows per cluster,
at least 20,000, at most what fits in 2 GiB), optionally refined by full passes over the data,
then every embedding is assigned in Beam to its (fp32-exact) nearest centroid.

communities: sentence-transformers' ``community_detection`` (every item with at least M items at
cosine >= T is a centre; largest communities first, each item in at most one), computed from
exact top-k neighbour lists in this process: all vectors in memory and O(N^2 d) work, which is
minutes for ~10^5 items on a CPU. Items in no community get cluster -1 and a null score.

Output (docs/architecture.md ``clusters/``): ``assignments/`` Parquet (id, cluster, score =
cosine to the cluster's centre: its centroid, or a community's central item), ``centroids.npy``,
``summary.parquet`` (size, members nearest the centre, distinctive terms), ``report.html``, and
``_manifest.json``, written last and only on success.

Memory: the stage counts what the process will hold (``pipelines/cluster/memory.py``) from the
inputs' row counts and refuses before reading any vector when that exceeds ``--memory-budget``;
the manifest records the budget, the parts counted and the measured peak RSS.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from sbert_pipeline.cluster.assign import ASSIGNMENTS
from sbert_pipeline.cluster.cluster_summaries import ClusterProfile
from sbert_pipeline.cluster.clustering import (
    LostRowsError,
    run_communities,
    run_kmeans,
    text_source,
    write_summaries,
)
from sbert_pipeline.cluster.incremental import (
    PreviousClustering,
    assign_new_rows,
    find_previous_clustering,
    fit_options,
)
from sbert_pipeline.cluster.memory import communities_parts, kmeans_parts, require_parts
from sbert_pipeline.cluster.options import MIN_SAMPLE, SAMPLE_PER_CLUSTER, Options
from sbert_pipeline.io.centroids import CENTROIDS
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.external_vectors import ExternalColumns, open_inputs, refuse_remote_workers
from sbert_pipeline.io.manifest_fields import created_now, model_fields, software_versions
from sbert_pipeline.io.output_dir import OutputLayout
from sbert_pipeline.io.previous_output import full_run, incremental_record
from sbert_pipeline.io.resources import MemoryBudget, peak_rss, resident_bytes
from sbert_pipeline.stage_api.beam_options import runner_name
from sbert_pipeline.stage_api.beam_run import (
    options_for,
    show_progress,
    transform_runner,
    workers_here,
)
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.shared_options import checked_memory_budget
from sbert_pipeline.stage_api.stage_output import stage_output
from sbert_pipeline.stage_api.stops import JobFailedError
from sbert_pipeline.vectors.sampling import sample_size

logger = logging.getLogger(__name__)

# What a cluster run writes (see docs/architecture.md, folder contracts).
LAYOUT = OutputLayout(datasets=(ASSIGNMENTS,), files=(CENTROIDS, "summary.parquet", "report.html"))


@dataclass(frozen=True)
class ClusterSummary:
    """What a finished cluster job reports."""

    output: str
    method: str
    items: int
    clusters: int
    unclustered: int
    objective: float  # sum over clustered items of 1 - cosine to their cluster's centre
    reseeded: int
    seconds: float

    def line(self) -> str:
        """One-line human summary."""
        clustered = self.items - self.unclustered
        mean = 1 - self.objective / clustered if clustered else float("nan")
        rest = f", {self.unclustered} in no community" if self.method == "communities" else ""
        reseeded = f", {self.reseeded} empty clusters re-seeded" if self.reseeded else ""
        return (
            f"clustered {self.items} embeddings into {self.clusters} clusters ({self.method}{rest}"
            f"{reseeded}; mean cosine to centre {mean:.3f}) in {self.seconds:.1f}s -> "
            f"{self.output}"
        )


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Cluster the embeddings and write the outputs; returns once the manifest is published.

    Args:
        options: the stage's options (checked when they were built).
        pipeline: a pipeline to build the assignment into (tests pass a ``TestPipeline``);
            communities run without Beam.

    Raises:
        ValueError, FileNotFoundError, IncompatibleEmbeddingsError, OutputExistsError: bad
            inputs, before any output is written.
        JobFailedError: the assignment lost rows; no manifest is written.
    """
    with content_checks(options.verify):
        return _run(options, pipeline)


def _run(options: Options, pipeline: beam.Pipeline | None) -> Result:
    """:func:`run` inside the content checks."""
    datasets = open_inputs(list(options.embeddings), ExternalColumns.from_args(options))
    items = sum(dataset.count for dataset in datasets)
    if items == 0:
        raise ValueError(f"{', '.join(options.embeddings)}: no embeddings to cluster (0 rows)")
    sample = _sample_size(options, items, datasets[0].dim) if options.method == "kmeans" else None
    budget = checked_memory_budget(options.memory_budget)
    memory = _require_memory(options, items, datasets[0].dim, sample, budget)
    source = text_source(options.text_from, datasets)
    beam_options = options_for(options.beam_options, pipeline)
    refuse_remote_workers(datasets, here=workers_here(beam_options, pipeline))
    previous = find_previous_clustering(options, datasets)  # before the output is prepared
    out = stage_output(
        "cluster", options, LAYOUT, replace_kind="clusters" if options.incremental else None
    )
    with out:
        show_progress(beam_options)
        # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
        start = time.perf_counter()
        record = None
        if isinstance(previous, PreviousClustering):
            clustering, rows = assign_new_rows(previous, datasets, out.attempt, options)
        elif options.method == "kmeans":
            record = full_run("cluster", options.output, previous)
            run_transform = transform_runner(beam_options, pipeline)
            try:
                clustering = run_kmeans(datasets, out.attempt, options, sample, run_transform)
            except LostRowsError as err:
                raise JobFailedError(str(err)) from err
        else:
            record = full_run("cluster", options.output, previous)
            clustering = run_communities(datasets, out.attempt, options)
        profiles = write_summaries(out.attempt, datasets, source, clustering, options)
        seconds = time.perf_counter() - start
        if record is None:
            record = incremental_record(
                previous.manifest,
                rows=rows,
                reused=[f"{CENTROIDS} (not refitted)", f"the assignments of {rows[0]} rows"],
                recomputed=[
                    f"assignments of {rows[1]} new rows to the stored centroids",
                    "sizes, representatives, terms, summary.parquet, report.html",
                ],
                seconds=seconds,
            )

        clustered = clustering.labels >= 0
        summary = ClusterSummary(
            output=options.output,
            method=options.method,
            items=items,
            clusters=clustering.n_clusters,
            unclustered=int(np.sum(~clustered)),
            objective=float(np.sum(1.0 - clustering.scores[clustered].astype(np.float64))),
            reseeded=int(clustering.details.get("fit", {}).get("reseeded_clusters", 0)),
            seconds=seconds,
        )
        beam_ran = options.method == "kmeans" and record["mode"] == "full"
        runner = runner_name(beam_options) if beam_ran else "launcher"
        fields = _manifest(options, datasets, summary, profiles, clustering.details, runner)
        memory_fields = {
            "memory_budget": budget.to_json(),
            "memory_needed": memory,
            "peak_rss_bytes": peak_rss(),
        }
        manifest = out.commit({**fields, **memory_fields, "incremental": record})
    return Result(options.output, manifest, summary)


def _manifest(
    options: Options,
    datasets: list[EmbeddingsDataset],
    summary: ClusterSummary,
    profiles: list[ClusterProfile],
    details: dict,
    runner: str,
) -> dict:
    """The ``_manifest.json`` of a finished run (model fields first, for later stages' checks)."""
    first = datasets[0].manifest
    clustered = summary.items - summary.unclustered
    return {
        "kind": "clusters",
        **model_fields(first),
        "method": options.method,
        "k": summary.clusters,
        "objective": summary.objective,
        "objective_definition": "sum over clustered items of 1 - cosine(item, cluster centre)",
        "mean_cosine_to_centre": 1 - summary.objective / max(clustered, 1),
        **details,
        "counts": {
            "items": summary.items,
            "clustered": clustered,
            "unclustered": summary.unclustered,
            "empty_clusters": sum(1 for profile in profiles if profile.size == 0),
        },
        "seed": options.seed,
        "fit_options": fit_options(options) if options.method == "kmeans" else None,
        "embeddings": [
            {"directory": dataset.directory, "manifest": dataset.manifest} for dataset in datasets
        ],
        "runner": runner,
        "software": software_versions(),
        "seconds": round(summary.seconds, 3),
        "created": created_now(),
    }


def _require_memory(
    options: Options, items: int, dim: int, sample: int | None, budget: MemoryBudget
) -> dict[str, int]:
    """What the run will hold (``pipelines/cluster/memory.py``), refused when over the budget
    before any vector is read."""
    if options.method == "kmeans":
        parts = kmeans_parts(resident_bytes(), items, dim, options.k, sample)
        what = f"k-means of {items:,} vectors of dimension {dim} into {options.k:,} clusters"
        change = "use a smaller --sample or --k"
    else:
        parts = communities_parts(resident_bytes(), items, dim, options.neighbors)
        what = f"communities of {items:,} vectors of dimension {dim} (all held in memory)"
        change = "cluster fewer embeddings, fewer --neighbors, or --method kmeans"
    require_parts(parts, budget, what, change)
    return parts


def _sample_size(options: Options, items: int, dim: int) -> int:
    """The k-means sample size: checked against K and N, clamped (and logged) to N."""
    if options.k > items:
        raise ValueError(f"--k {options.k} is more than the {items} embeddings to cluster")
    if options.sample is not None and options.sample > items:
        logger.warning(
            "--sample %d is more than the %d embeddings; fitting on all of them",
            options.sample,
            items,
        )
    return sample_size(
        items,
        dim,
        options.k,
        per_cluster=SAMPLE_PER_CLUSTER,
        minimum=MIN_SAMPLE,
        requested=options.sample,
        clusters_option="--k",
    )
