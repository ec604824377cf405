"""``sbert cluster``: topics of an embeddings output by spherical k-means, or communities.

    sbert cluster --embeddings DIR [DIR ...] --output DIR --k K
        [--method kmeans|communities] [--sample N] [--iterations I] [--refine-passes P]
        [--seed S] [--text-from EMBEDDINGS_DIR_OR_CORPUS_GLOB]
        [--threshold T] [--min-size M] [--neighbors K0]      (communities)
        [--representatives R] [--terms T] [--overwrite] [Beam options]

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
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import apache_beam as beam
import numpy as np

from jobs.job_options import (
    job_output,
)
from jobs.parsers.cluster import MIN_SAMPLE, SAMPLE_PER_CLUSTER, build_parser
from pipelines.cluster.assign import ASSIGNMENTS
from pipelines.cluster.run import (
    ClusterSettings,
    LostRowsError,
    has_manifest,
    run_communities,
    run_kmeans,
    text_source,
    write_summaries,
)
from pipelines.io.centroids import CENTROIDS
from pipelines.io.content_checks import content_checks
from pipelines.io.corpus_files import match_corpus
from pipelines.io.external_vectors import ExternalColumns, open_inputs
from pipelines.io.manifest_fields import created_now, model_fields, software_versions
from pipelines.io.output_dir import OutputLayout
from pipelines.stage_api.beam_options import runner_name
from pipelines.stage_api.beam_run import options_for, show_progress, transform_runner
from pipelines.stage_api.stops import JobFailedError
from pipelines.vectors.checks import check_cosine
from pipelines.vectors.sampling import sample_size

logger = logging.getLogger(__name__)

# What a cluster run writes (see docs/architecture.md, folder contracts).
LAYOUT = OutputLayout(datasets=(ASSIGNMENTS,), files=(CENTROIDS, "summary.parquet", "report.html"))

# The k-means sample: on a planted 1,000-cluster mixture (200k x 384) 64 rows per cluster gave
# an ARI of 0.99 in 5 CPU-seconds, half the sample and seeding pool 0.98 in 3; small k still
# gets a solid sample; the cap keeps the launcher's copy at 2 GiB whatever k asks for.


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


def run(
    argv: list[str] | None = None, test_pipeline: beam.Pipeline | None = None
) -> ClusterSummary:
    """Cluster the embeddings and write the outputs; returns after the manifest is written.

    Args:
        argv: job options followed by any Beam options.
        test_pipeline: a pipeline to build the assignment into (tests pass a ``TestPipeline``);
            communities run without Beam.

    Raises:
        ValueError, FileNotFoundError, IncompatibleEmbeddingsError, OutputExistsError: bad
            options or inputs, before any output is written.
        JobFailedError: the assignment lost rows; no manifest is written.
    """
    args, beam_args = build_parser().parse_known_args(argv)
    with content_checks(args.verify):
        return _run(args, beam_args, argv, test_pipeline)


def _run(
    args, beam_args: list[str], argv: list[str] | None, test_pipeline: beam.Pipeline | None
) -> ClusterSummary:
    """:func:`run` once the options are parsed."""
    _check_options(args)
    datasets = open_inputs(args.embeddings, ExternalColumns.from_args(args))
    items = sum(dataset.count for dataset in datasets)
    if items == 0:
        raise ValueError(f"{', '.join(args.embeddings)}: no embeddings to cluster (0 rows)")
    sample = _sample_size(args, items, datasets[0].dim) if args.method == "kmeans" else None
    source = text_source(args.text_from, datasets)
    settings = ClusterSettings(
        **{field.name: getattr(args, field.name) for field in dataclasses.fields(ClusterSettings)}
    )
    options = options_for(beam_args, test_pipeline)
    out = job_output("cluster", args.output, args.overwrite, argv, LAYOUT)
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    final, args.output = args.output, out.attempt
    with out:
        show_progress(options)

        start = time.perf_counter()
        if args.method == "kmeans":
            run_transform = transform_runner(options, test_pipeline)
            try:
                clustering = run_kmeans(datasets, args.output, settings, sample, run_transform)
            except LostRowsError as err:
                raise JobFailedError(str(err)) from err
        else:
            clustering = run_communities(datasets, args.output, settings)
        inputs = ", ".join(args.embeddings)
        profiles = write_summaries(args.output, datasets, source, clustering, settings, inputs)
        seconds = time.perf_counter() - start

        clustered = clustering.labels >= 0
        summary = ClusterSummary(
            output=final,
            method=args.method,
            items=items,
            clusters=clustering.n_clusters,
            unclustered=int(np.sum(~clustered)),
            objective=float(np.sum(1.0 - clustering.scores[clustered].astype(np.float64))),
            reseeded=int(clustering.details.get("fit", {}).get("reseeded_clusters", 0)),
            seconds=seconds,
        )
        manifest = _manifest(args, datasets, summary, profiles, clustering.details, options)
        out.commit(manifest)
        return summary


def _manifest(args, datasets, summary: ClusterSummary, profiles, details: dict, options) -> dict:
    """The ``_manifest.json`` of a finished run (model fields first, for later stages' checks)."""
    first = datasets[0].manifest
    clustered = summary.items - summary.unclustered
    return {
        "kind": "clusters",
        **model_fields(first),
        "method": args.method,
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
        "seed": args.seed,
        "embeddings": [
            {"directory": dataset.directory, "manifest": dataset.manifest} for dataset in datasets
        ],
        "runner": runner_name(options) if args.method == "kmeans" else "launcher",
        "software": software_versions(),
        "seconds": round(summary.seconds, 3),
        "created": created_now(),
    }


def check_options(argv: list[str]) -> None:
    """The option values and the ``--text-from`` glob, checked before ``sbert run`` starts any
    stage (no input is read, no output touched); ValueError or FileNotFoundError names the
    option."""
    args, _ = build_parser().parse_known_args(argv)
    _check_options(args)
    if args.text_from is not None and not has_manifest(args.text_from):
        match_corpus(args.text_from)  # FileNotFoundError naming the glob


def _check_options(args) -> None:
    """Refuse option values that cannot work, naming the option."""
    if args.method == "kmeans":
        if args.k is None:
            raise ValueError("--k is required with --method kmeans")
        if args.k < 1:
            raise ValueError(f"--k must be at least 1, got {args.k}")
        if args.iterations < 1:
            raise ValueError(f"--iterations must be at least 1, got {args.iterations}")
        if args.refine_passes < 0:
            raise ValueError(f"--refine-passes must be >= 0, got {args.refine_passes}")
        if args.sample is not None and args.sample < 1:
            raise ValueError(f"--sample must be at least 1, got {args.sample}")
    else:
        if args.k is not None:
            raise ValueError(
                "--k applies to --method kmeans; communities finds its own number of clusters "
                "from --threshold and --min-size"
            )
        check_cosine(args.threshold, "--threshold")
        if args.min_size < 1:
            raise ValueError(f"--min-size must be at least 1, got {args.min_size}")
        if args.neighbors < 1 or args.block_size < 1:
            raise ValueError("--neighbors and --block-size must be at least 1")
    if args.representatives < 0 or args.terms < 0:
        raise ValueError("--representatives and --terms must be >= 0")


def _sample_size(args, items: int, dim: int) -> int:
    """The k-means sample size: checked against K and N, clamped (and logged) to N."""
    if args.k > items:
        raise ValueError(f"--k {args.k} is more than the {items} embeddings to cluster")
    if args.sample is not None and args.sample > items >= args.k:
        logger.warning(
            "--sample %d is more than the %d embeddings; fitting on all of them",
            args.sample,
            items,
        )
    return sample_size(
        items,
        dim,
        args.k,
        per_cluster=SAMPLE_PER_CLUSTER,
        minimum=MIN_SAMPLE,
        requested=args.sample,
        clusters_option="--k",
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run and print the summary."""
    summary = run(argv)
    print(summary.line())
    return 0
