"""The clustering itself: k-means (fit here on a sample, assignment in Beam) or communities (all
in this process), then the summaries and the report; ``stage.py`` opens the inputs and the
output around it.

The stage passes the callable that runs a pipeline, so the clustering does not choose a runner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems
from sbert_pipeline.cluster.assign import (
    AssignClusters,
    read_assignments,
    sample_embeddings,
    write_assignments,
)
from sbert_pipeline.cluster.cluster_summaries import (
    ClusterProfile,
    clusters_report_html,
    nearest_members,
    summarize,
    text_sample,
    write_summary,
)
from sbert_pipeline.cluster.options import Options
from sbert_pipeline.io.centroids import CENTROIDS, save_centroids
from sbert_pipeline.io.corpus_files import match_corpus
from sbert_pipeline.io.corpus_reader import CorpusSpec
from sbert_pipeline.io.embeddings import EmbeddingsDataset, all_shards
from sbert_pipeline.io.html import write_text
from sbert_pipeline.io.output_dir import MANIFEST, join
from sbert_pipeline.io.texts import recorded_corpus_spec, texts_from_corpus, texts_from_embeddings
from sbert_pipeline.vectors.communities import detect_communities
from sbert_pipeline.vectors.kmeans import fit_spherical_kmeans, lloyd_pass
from sbert_pipeline.vectors.precision import normalize_rows
from sbert_pipeline.vectors.progress import stage_progress

logger = logging.getLogger(__name__)

# Texts per cluster read for its distinctive terms: enough for stable term counts, and bounded
# so that summaries of millions of items read a bounded number of texts.
TEXTS_PER_CLUSTER = 1000


class LostRowsError(RuntimeError):
    """The assignment wrote fewer (or more) rows than there are embeddings."""


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


def has_manifest(path: str) -> bool:
    """Whether ``path`` is an output folder of this project (it holds a manifest)."""
    return FileSystems.exists(join(path, MANIFEST))


def text_source(text_from: str | None, datasets: list[EmbeddingsDataset]) -> TextSource | None:
    """Where texts come from: embeddings with texts, a corpus glob, or nowhere (ids only).

    Raises:
        ValueError, FileNotFoundError: ``--text-from`` names embeddings without texts, or a
            glob that matches nothing.
    """
    if text_from is None:
        with_text = tuple(dataset for dataset in datasets if dataset.has_text)
        return TextSource(embeddings=with_text) if with_text else None
    if has_manifest(text_from):
        source = EmbeddingsDataset.open(text_from)
        if not source.has_text:
            raise ValueError(f"--text-from {text_from}: embeddings written without --keep-text")
        return TextSource(embeddings=(source,))
    spec = datasets[0].manifest.get("input", {})
    corpus_spec = recorded_corpus_spec(datasets[0].manifest)
    if corpus_spec.id_field is None and text_from != spec.get("pattern"):
        logger.warning(
            "the embeddings' ids were derived from file and row under %r; texts from %r only "
            "match if the files sit at the same place relative to the pattern",
            spec.get("pattern"),
            text_from,
        )
    match_corpus(text_from)  # FileNotFoundError now rather than after the clustering
    return TextSource(corpus=text_from, spec=corpus_spec)


def run_kmeans(
    datasets: list[EmbeddingsDataset],
    output: str,
    options: Options,
    sample: int,
    run: Callable[[str, beam.PTransform], Any],
) -> Clustering:
    """Fit on a sample, refine on all rows if asked, assign every row in Beam (through ``run``,
    the stage's pipeline runner); writes ``centroids.npy`` and ``assignments/`` under ``output``.

    Raises:
        LostRowsError: the assignment did not write one row per embedding.
    """
    items = sum(dataset.count for dataset in datasets)
    logger.info("sampling %d of %d embeddings", sample, items)
    _, vectors = sample_embeddings(datasets, sample, options.seed)
    fit = fit_spherical_kmeans(
        vectors,
        options.k,
        iterations=options.iterations,
        seed=options.seed,
        precision=options.precision,
    )
    del vectors
    logger.info(
        "fitted k=%d on %d rows: %d iterations, %d clusters re-seeded",
        options.k,
        sample,
        fit.iterations,
        fit.reseeded,
    )
    centroids = fit.centroids
    refine_empty = []
    # Each pass reads every row: at 10M rows, minutes apiece.
    total = options.refine_passes * items
    with stage_progress("k-means refine", total=total, unit="vectors") as bar:
        for _ in range(options.refine_passes):
            batches = (batch for dataset in datasets for _, batch in dataset.batches())
            sums = lloyd_pass(batches, centroids, precision=options.precision, progress=bar)
            centroids, empty = sums.centroids(centroids)
            refine_empty.append(int(empty.sum()))
    centroids_path = join(output, CENTROIDS)
    save_centroids(centroids_path, centroids)

    shards = all_shards(datasets)
    assign = AssignClusters(
        shards, centroids_path, output, precision=options.precision, total=items
    )
    run("AssignClusters", assign)
    table = read_assignments(output)
    if table.num_rows != items:
        raise LostRowsError(
            f"the assignment wrote {table.num_rows} rows for {items} embeddings; "
            f"nothing was published; the previous output is unchanged"
        )
    labels = table.column("cluster").to_numpy().astype(np.int64)
    scores = table.column("score").to_numpy().astype(np.float32)
    details = {
        "fit": fit.describe(),
        "sample": {"requested": options.sample, "used": sample},
        "iterations": fit.iterations,
        "refine_passes": options.refine_passes,
        "refine_empty_clusters": refine_empty,
        "precision": options.precision,
    }
    return Clustering(table.column("id").to_pylist(), labels, scores, options.k, details)


def run_communities(datasets: list[EmbeddingsDataset], output: str, options: Options) -> Clustering:
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
        threshold=options.threshold,
        min_community_size=options.min_size,
        neighbors=options.neighbors,
        block_size=options.block_size,
    )
    labels = np.full(len(ids), -1, np.int64)
    scores = np.zeros(len(ids), np.float32)
    centres = np.zeros((len(communities), vectors.shape[1]), np.float32)
    for cluster, members in enumerate(communities):
        centres[cluster] = vectors[members[0]]
        labels[members] = cluster
        scores[members] = vectors[members] @ centres[cluster]
    write_assignments(output, datasets, ids, labels, scores)
    save_centroids(join(output, CENTROIDS), centres)
    logger.info("found %d communities covering %d items", len(communities), (labels >= 0).sum())
    details = {
        "communities": {
            "threshold": options.threshold,
            "min_size": options.min_size,
            "semantics": "sentence_transformers.util.community_detection",
        }
    }
    return Clustering(ids, labels, scores, len(communities), details)


def write_summaries(
    output: str,
    datasets: list[EmbeddingsDataset],
    source: TextSource | None,
    clustering: Clustering,
    options: Options,
) -> list[ClusterProfile]:
    """Write summary.parquet and report.html under ``output``; returns the per-cluster profiles.

    Texts are read only for the representatives and a bounded sample per cluster (for the
    terms); how many were wanted and found goes to ``clustering.details["texts"]``.
    """
    ids, labels, scores = clustering.ids, clustering.labels, clustering.scores
    n_clusters, details = clustering.n_clusters, clustering.details
    nearest = nearest_members(labels, scores, n_clusters, options.representatives)
    term_rows = text_sample(labels, n_clusters, TEXTS_PER_CLUSTER, options.seed)
    wanted = {ids[row] for rows in (*nearest, *term_rows) for row in rows}
    texts = source.texts(wanted) if source is not None else {}
    if source is not None and wanted and not texts:
        logger.warning("none of the clustered ids were found in %s", source.describe())
    details["texts"] = {
        "source": source.describe() if source is not None else None,
        "wanted": len(wanted),
        "found": len(texts),
    }
    profiles = summarize(
        ids,
        labels,
        scores,
        n_clusters,
        texts,
        representatives=options.representatives,
        term_rows=term_rows,
        top_terms=options.terms,
    )
    write_summary(join(output, "summary.parquet"), profiles)
    clustered = int(np.sum(labels >= 0))
    facts = {
        "method": options.method,
        "embeddings": ", ".join(options.embeddings),
        "model": datasets[0].manifest.get("model_id"),
        "items": len(ids),
        "clusters": n_clusters,
        "mean cosine to centre": f"{np.mean(scores[labels >= 0]):.4f}" if clustered else "-",
    }
    if options.method == "communities":
        facts["in no community"] = len(ids) - clustered
        facts["threshold / min size"] = f"{options.threshold} / {options.min_size}"
    else:
        facts["sample / iterations"] = f"{details['sample']['used']} / {details['iterations']}"
        facts["re-seeded clusters"] = details["fit"]["reseeded_clusters"]
    write_text(join(output, "report.html"), clusters_report_html(profiles, facts))
    return profiles
