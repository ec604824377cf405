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

Output (DESIGN.md ``clusters/``): ``assignments/`` Parquet (id, cluster, score = cosine to the
cluster's centre: its centroid, or a community's central item), ``centroids.npy``,
``summary.parquet`` (size, members nearest the centre, distinctive terms), ``report.html``, and
``_manifest.json``, written last and only on success.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from jobs.beam_options import is_local, pipeline_options, runner_name
from jobs.errors import JobFailedError
from pipelines.cluster.assign import (
    ASSIGNMENTS,
    AssignClusters,
    read_assignments,
    sample_embeddings,
    write_assignments,
)
from pipelines.cluster.summary import (
    ClusterProfile,
    nearest_members,
    report_html,
    summarize,
    text_sample,
    write_summary,
)
from pipelines.io.centroids import CENTROIDS, save_centroids
from pipelines.io.corpus_files import match_corpus
from pipelines.io.corpus_reader import CorpusSpec
from pipelines.io.embeddings import MODEL_FIELDS, EmbeddingsDataset, all_shards
from pipelines.io.html import write_text
from pipelines.io.output_dir import MANIFEST, OutputLayout, join, prepare_output
from pipelines.io.texts import texts_from_corpus, texts_from_embeddings
from pipelines.vectors.communities import detect_communities
from pipelines.vectors.kmeans import fit_spherical_kmeans, lloyd_pass
from pipelines.vectors.precision import normalize_rows
from sbert_core import __version__

logger = logging.getLogger(__name__)

# What a cluster run writes (see DESIGN.md, data contracts).
LAYOUT = OutputLayout(datasets=(ASSIGNMENTS,), files=(CENTROIDS, "summary.parquet", "report.html"))

# The k-means sample: on a planted 1,000-cluster mixture (200k x 384) 64 rows per cluster gave
# an ARI of 0.99 in 5 CPU-seconds, half the sample and seeding pool 0.98 in 3; small k still
# gets a solid sample; the cap keeps the launcher's copy at 2 GiB whatever k asks for.
SAMPLE_PER_CLUSTER = 64
MIN_SAMPLE = 20_000
SAMPLE_BYTES = 2 * 1024**3
# Texts per cluster read for its distinctive terms: enough for stable term counts, and bounded
# so that summaries of millions of items read a bounded number of texts.
TEXTS_PER_CLUSTER = 1000


@dataclass(frozen=True)
class Clustering:
    """Every item's cluster and score, and what the manifest records about how they were found."""

    ids: list[str]
    labels: np.ndarray  # (N,) int64, -1: in no cluster
    scores: np.ndarray  # (N,) float32, cosine to the cluster's centre
    n_clusters: int
    details: dict


@dataclass(frozen=True)
class TextSource:
    """Where the summaries' texts come from: embeddings with a text column, or the corpus."""

    embeddings: tuple[EmbeddingsDataset, ...] = ()
    corpus: str | None = None  # a glob, read with ``spec``
    spec: CorpusSpec | None = None

    def texts(self, wanted: set[str]) -> dict[str, str]:
        """``{id: text}`` for the wanted ids that the source has."""
        if self.corpus is not None:
            return texts_from_corpus(self.corpus, self.spec, wanted)
        return texts_from_embeddings(self.embeddings, wanted)

    def describe(self) -> str:
        """For the manifest."""
        return self.corpus or ", ".join(dataset.directory for dataset in self.embeddings)


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


def build_parser() -> argparse.ArgumentParser:
    """Job options; anything not listed here is passed on to Beam's ``PipelineOptions``."""
    parser = argparse.ArgumentParser(
        prog="sbert cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--embeddings",
        required=True,
        nargs="+",
        action="extend",
        help="embeddings output directories (one model; several are clustered together)",
    )
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--method", default="kmeans", choices=["kmeans", "communities"])
    parser.add_argument("--k", type=int, default=None, help="number of clusters (kmeans)")
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        help=f"rows the k-means fit uses (default: {SAMPLE_PER_CLUSTER} per cluster, at least "
        f"{MIN_SAMPLE:,}, at most 2 GiB of vectors; clamped to the number of rows)",
    )
    parser.add_argument("--iterations", type=int, default=20, help="Lloyd iterations, at most")
    parser.add_argument(
        "--refine-passes",
        type=int,
        default=0,
        help="Lloyd passes over all rows after the sample fit (each reads the input once)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (sample and seeding)")
    parser.add_argument(
        "--precision",
        default="auto",
        choices=["auto", "bfloat16", "float32"],
        help="candidate search of the assignment; labels are the fp32 nearest centroid anyway",
    )
    parser.add_argument(
        "--text-from",
        default=None,
        help="where texts for the summaries come from: an embeddings directory written with "
        "--keep-text, or the corpus glob the embeddings were made from (default: the inputs' "
        "text column when they have one)",
    )
    parser.add_argument(
        "--threshold", type=float, default=0.75, help="communities: minimum cosine to the centre"
    )
    parser.add_argument(
        "--min-size", type=int, default=10, help="communities: smallest community (with centre)"
    )
    parser.add_argument(
        "--neighbors",
        type=int,
        default=64,
        help="communities: neighbour-list length (larger communities are completed by a "
        "threshold search)",
    )
    parser.add_argument(
        "--block-size", type=int, default=1024, help="communities: query rows per similarity block"
    )
    parser.add_argument(
        "--representatives", type=int, default=5, help="members nearest the centre listed"
    )
    parser.add_argument("--terms", type=int, default=8, help="distinctive terms per cluster")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return parser


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
    _check_options(args)
    datasets = EmbeddingsDataset.open_many(args.embeddings)
    items = sum(dataset.count for dataset in datasets)
    if items == 0:
        raise ValueError(f"{', '.join(args.embeddings)}: no embeddings to cluster (0 rows)")
    sample = _sample_size(args, items, datasets[0].dim) if args.method == "kmeans" else None
    text_source = _text_source(args.text_from, datasets)
    options = test_pipeline.options if test_pipeline is not None else pipeline_options(beam_args)
    out = prepare_output(
        args.output,
        overwrite=args.overwrite,
        job={"command": "cluster", "argv": argv or sys.argv[1:]},
        layout=LAYOUT,
    )
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    final, args.output = args.output, out.attempt
    with out:
        if is_local(options):
            logging.getLogger("pipelines").setLevel(logging.INFO)

        start = time.perf_counter()
        if args.method == "kmeans":
            clustering = _kmeans(args, datasets, sample, items, options, test_pipeline)
        else:
            clustering = _communities(args, datasets)
        profiles = _summaries(args, datasets, text_source, clustering)
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
        **{field: first[field] for field in MODEL_FIELDS if field in first},
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
        "software": {"sbert_pipeline": __version__, "apache_beam": beam.__version__},
        "seconds": round(summary.seconds, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def check_options(argv: list[str]) -> None:
    """Check this command's option values without reading inputs or touching any output.

    ``sbert run`` calls it for every stage before running the first one.

    Raises:
        ValueError, FileNotFoundError: a value the command would refuse, naming the option.
    """
    args, _ = build_parser().parse_known_args(argv)
    _check_options(args)
    if args.text_from is not None and not _has_manifest(args.text_from):
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
        if not -1.0 <= args.threshold <= 1.0:
            raise ValueError(f"--threshold is a cosine, in [-1, 1]; got {args.threshold}")
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
    cap = max(args.k, SAMPLE_BYTES // (4 * dim))
    if args.sample is None:
        return min(items, cap, max(SAMPLE_PER_CLUSTER * args.k, MIN_SAMPLE))
    if args.sample < args.k:
        raise ValueError(f"--sample {args.sample} is smaller than --k {args.k}")
    if args.sample > items:
        logger.warning(
            "--sample %d is more than the %d embeddings; fitting on all of them",
            args.sample,
            items,
        )
        return items
    return args.sample


def _text_source(text_from: str | None, datasets: list[EmbeddingsDataset]) -> TextSource | None:
    """Where texts come from: embeddings with texts, a corpus glob, or nowhere (ids only)."""
    if text_from is None:
        with_text = tuple(dataset for dataset in datasets if dataset.has_text)
        return TextSource(embeddings=with_text) if with_text else None
    if _has_manifest(text_from):
        source = EmbeddingsDataset.open(text_from)
        if not source.has_text:
            raise ValueError(f"--text-from {text_from}: embeddings written without --keep-text")
        return TextSource(embeddings=(source,))
    spec = datasets[0].manifest.get("input", {})
    corpus_spec = CorpusSpec(
        fmt=spec.get("fmt"),
        text_field=spec.get("text_field", "text"),
        id_field=spec.get("id_field"),
        max_record_bytes=spec.get("max_record_bytes", CorpusSpec.max_record_bytes),
        max_record_lines=spec.get("max_record_lines", CorpusSpec.max_record_lines),
    )
    if corpus_spec.id_field is None and text_from != spec.get("pattern"):
        logger.warning(
            "the embeddings' ids were derived from file and row under %r; texts from %r only "
            "match if the files sit at the same place relative to the pattern",
            spec.get("pattern"),
            text_from,
        )
    match_corpus(text_from)  # FileNotFoundError now rather than after the clustering
    return TextSource(corpus=text_from, spec=corpus_spec)


def _has_manifest(path: str) -> bool:
    return FileSystems.exists(join(path, MANIFEST))


def _kmeans(args, datasets, sample: int, items: int, options, test_pipeline) -> Clustering:
    """Fit on a sample, refine on all rows if asked, assign every row in Beam."""
    logger.info("sampling %d of %d embeddings", sample, items)
    _, vectors = sample_embeddings(datasets, sample, args.seed)
    fit = fit_spherical_kmeans(
        vectors, args.k, iterations=args.iterations, seed=args.seed, precision=args.precision
    )
    del vectors
    logger.info(
        "fitted k=%d on %d rows: %d iterations, %d clusters re-seeded",
        args.k,
        sample,
        fit.iterations,
        fit.reseeded,
    )
    centroids = fit.centroids
    refine_empty = []
    for _ in range(args.refine_passes):
        batches = (batch for dataset in datasets for _, batch in dataset.batches())
        sums = lloyd_pass(batches, centroids, precision=args.precision)
        centroids, empty = sums.centroids(centroids)
        refine_empty.append(int(empty.sum()))
    centroids_path = join(args.output, CENTROIDS)
    save_centroids(centroids_path, centroids)

    pipeline = test_pipeline if test_pipeline is not None else beam.Pipeline(options=options)
    _ = pipeline | "AssignClusters" >> AssignClusters(
        all_shards(datasets), centroids_path, args.output, precision=args.precision
    )
    result = pipeline.run()
    result.wait_until_finish()
    client = getattr(result, "client", None)  # the Dask runner leaves its client open
    if client is not None:
        client.close()

    table = read_assignments(args.output)
    if table.num_rows != items:
        raise JobFailedError(
            f"the assignment wrote {table.num_rows} rows for {items} embeddings; "
            f"nothing was published; the previous output is unchanged"
        )
    labels = table.column("cluster").to_numpy().astype(np.int64)
    scores = table.column("score").to_numpy().astype(np.float32)
    details = {
        "fit": fit.describe(),
        "sample": {"requested": args.sample, "used": sample},
        "iterations": fit.iterations,
        "refine_passes": args.refine_passes,
        "refine_empty_clusters": refine_empty,
        "precision": args.precision,
    }
    return Clustering(table.column("id").to_pylist(), labels, scores, args.k, details)


def _communities(args, datasets) -> Clustering:
    """Communities over all vectors in this process; assignments written shard by shard."""
    ids: list[str] = []
    parts = []
    for dataset in datasets:
        dataset_ids, vectors = dataset.load()
        ids.extend(dataset_ids)
        parts.append(vectors)
    vectors = normalize_rows(np.concatenate(parts))
    communities = detect_communities(
        vectors,
        threshold=args.threshold,
        min_community_size=args.min_size,
        neighbors=args.neighbors,
        block_size=args.block_size,
    )
    labels = np.full(len(ids), -1, np.int64)
    scores = np.zeros(len(ids), np.float32)
    centres = np.zeros((len(communities), vectors.shape[1]), np.float32)
    for cluster, members in enumerate(communities):
        centres[cluster] = vectors[members[0]]
        labels[members] = cluster
        scores[members] = vectors[members] @ centres[cluster]
    write_assignments(args.output, datasets, ids, labels, scores)
    save_centroids(join(args.output, CENTROIDS), centres)
    logger.info("found %d communities covering %d items", len(communities), (labels >= 0).sum())
    details = {
        "communities": {
            "threshold": args.threshold,
            "min_size": args.min_size,
            "semantics": "sentence_transformers.util.community_detection",
        }
    }
    return Clustering(ids, labels, scores, len(communities), details)


def _summaries(
    args, datasets, text_source: TextSource | None, clustering: Clustering
) -> list[ClusterProfile]:
    """Write summary.parquet and report.html; returns the per-cluster profiles.

    Texts are read only for the representatives and a bounded sample per cluster (for the
    terms); how many were wanted and found goes to ``clustering.details["texts"]``.
    """
    ids, labels, scores = clustering.ids, clustering.labels, clustering.scores
    n_clusters, details = clustering.n_clusters, clustering.details
    nearest = nearest_members(labels, scores, n_clusters, args.representatives)
    term_rows = text_sample(labels, n_clusters, TEXTS_PER_CLUSTER, args.seed)
    wanted = {ids[row] for rows in (*nearest, *term_rows) for row in rows}
    texts = text_source.texts(wanted) if text_source is not None else {}
    if text_source is not None and wanted and not texts:
        logger.warning("none of the clustered ids were found in %s", text_source.describe())
    details["texts"] = {
        "source": text_source.describe() if text_source is not None else None,
        "wanted": len(wanted),
        "found": len(texts),
    }
    profiles = summarize(
        ids,
        labels,
        scores,
        n_clusters,
        texts,
        representatives=args.representatives,
        term_rows=term_rows,
        top_terms=args.terms,
    )
    write_summary(join(args.output, "summary.parquet"), profiles)
    clustered = int(np.sum(labels >= 0))
    facts = {
        "method": args.method,
        "embeddings": ", ".join(args.embeddings),
        "model": datasets[0].manifest.get("model_id"),
        "items": len(ids),
        "clusters": n_clusters,
        "mean cosine to centre": f"{np.mean(scores[labels >= 0]):.4f}" if clustered else "-",
    }
    if args.method == "communities":
        facts["in no community"] = len(ids) - clustered
        facts["threshold / min size"] = f"{args.threshold} / {args.min_size}"
    else:
        facts["sample / iterations"] = f"{details['sample']['used']} / {details['iterations']}"
        facts["re-seeded clusters"] = details["fit"]["reseeded_clusters"]
    write_text(join(args.output, "report.html"), report_html(profiles, facts))
    return profiles


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run and print the summary."""
    summary = run(argv)
    print(summary.line())
    return 0
