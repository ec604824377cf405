"""Options of the cluster stage (``sbert cluster``, ``sbert run``'s ``cluster:``,
``cluster.Options``).

Beam-free: the command line is generated from these fields (``jobs/options_cli.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sbert_pipeline.stage_api.options import OptionError, at_least, in_range, option
from sbert_pipeline.stage_api.shared_options import (
    ExternalVectorOptions,
    beam_options_option,
    checked_memory_budget,
    kmeans_iterations_option,
    kmeans_sample_option,
    memory_budget_option,
    output_option,
    overwrite_option,
    seed_option,
    verify_option,
)

# The k-means sample: on a planted 1,000-cluster mixture (200k x 384) 64 rows per cluster gave
# an ARI of 0.99 in 5 CPU-seconds, half the sample and seeding pool 0.98 in 3; small k still
# gets a solid sample; the cap (2 GiB, pipelines/vectors/sampling.py) keeps the launcher's copy
# bounded whatever k asks for.
SAMPLE_PER_CLUSTER = 64
MIN_SAMPLE = 20_000


@dataclass(frozen=True)
class Options(ExternalVectorOptions):
    """Group embeddings into topics: spherical k-means into --k clusters, or communities of
    items close to a centre item. Each cluster is summarised by its most central texts and its
    distinctive terms, in a report."""

    INPUT_OPTIONS = ("embeddings", "text_from")
    DOCS = ("docs/incremental.md", "docs/memory-and-disk.md")

    embeddings: tuple[str, ...] = option(
        help="embeddings output directories (one model; several are clustered together)",
        required=True,
        metavar="DIR",
    )
    output: str = output_option()
    method: Literal["kmeans", "communities"] = option(
        "kmeans",
        "kmeans: spherical k-means into --k clusters; communities: groups of at least "
        "--min-size items within --threshold of a centre item",
    )
    k: int | None = option(help="number of clusters (kmeans)")
    sample: int | None = kmeans_sample_option("", SAMPLE_PER_CLUSTER, MIN_SAMPLE)
    iterations: int = kmeans_iterations_option()
    refine_passes: int = option(
        0,
        "Lloyd passes over all rows after the sample fit (each reads the input once)",
        advanced=True,
    )
    seed: int = seed_option("random seed (sample and seeding)")
    precision: Literal["auto", "bfloat16", "float32"] = option(
        "auto",
        "candidate search of the assignment; labels are the fp32 nearest centroid anyway",
        advanced=True,
    )
    text_from: str | None = option(
        help="texts for the summaries: an embeddings directory written with --keep-text, or the "
        "corpus glob (default: the inputs' text column when they have one)",
        metavar="PATH",
    )
    threshold: float = option(0.75, "communities: minimum cosine to the centre")
    min_size: int = option(10, "communities: smallest community (with centre)")
    neighbors: int = option(
        64,
        "communities: neighbour-list length (larger communities are completed by a threshold "
        "search)",
        advanced=True,
    )
    block_size: int = option(1024, "communities: query rows per similarity block", advanced=True)
    representatives: int = option(5, "members nearest the centre listed", advanced=True)
    terms: int = option(8, "distinctive terms per cluster", advanced=True)
    incremental: bool = option(
        False,
        "kmeans: reuse the previous clustering in --output (its centroids and the assignments "
        "of unchanged embeddings parts); only new rows are assigned to the stored centroids",
    )
    refit: bool = option(
        False, "with --incremental: fit the centroids again on all rows (a full run)"
    )
    # The k-means sample, the centroids, one assignment batch and the per-row results, or for
    # communities every vector: refused before any vector is read when they do not fit.
    memory_budget: str = memory_budget_option()
    overwrite: bool = overwrite_option()
    verify: bool = verify_option()
    beam_options: Any = beam_options_option()

    def check(self) -> None:
        """Refuse values that cannot work before any input is read; each method's own options
        are checked only with that method, but a cosine out of range (or NaN) always."""
        in_range("threshold", self.threshold, -1.0, 1.0)
        if self.method == "kmeans":
            self._check_kmeans()
        else:
            self._check_communities()
        if self.refit and not self.incremental:
            raise OptionError(
                "refit", "applies with --incremental (a run without it always fits afresh)"
            )
        at_least("representatives", self.representatives, 0)
        at_least("terms", self.terms, 0)
        checked_memory_budget(self.memory_budget)

    def _check_kmeans(self) -> None:
        if self.k is None:
            raise OptionError("k", "required with --method kmeans")
        at_least("k", self.k, 1)
        at_least("iterations", self.iterations, 1)
        at_least("refine_passes", self.refine_passes, 0)
        at_least("sample", self.sample, 1)
        if self.sample is not None and self.sample < self.k:
            raise OptionError("sample", f"{self.sample} is smaller than --k {self.k}")

    def _check_communities(self) -> None:
        if self.k is not None:
            raise OptionError(
                "k",
                "applies to --method kmeans; communities finds its own number of clusters "
                "from --threshold and --min-size",
            )
        at_least("min_size", self.min_size, 1)
        at_least("neighbors", self.neighbors, 1)
        at_least("block_size", self.block_size, 1)
