"""Options of the pairs stage (``sbert pairs``, ``sbert run``'s ``pairs:``, ``pairs.Options``).

Beam-free and numpy-free: the command line is generated from these fields
(``jobs/options_cli.py``), and ``--help`` loads none of the search; the class docstring is the
command's description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.resources import MemoryBudget
from sbert_pipeline.io.sizes import parse_size
from sbert_pipeline.pairs.defaults import (
    DEFAULT_MAX_BLOCK,
    MIN_SAMPLE,
    ROWS_PER_RANGE,
    ROWS_PER_SHARD,
    SAMPLE_PER_CLUSTER,
    TUNE_SAMPLE,
)
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

# Options of one method only: refused with the other, where they would be ignored.
CLUSTERED_ONLY = ("clusters", "nprobe", "max_block", "sample", "shards")
EXACT_ONLY = ("ranges",)


@dataclass(frozen=True)
class Options(ExternalVectorOptions):
    """Find each item's k most similar items and, with --threshold, every pair at or above a
    cosine, in embeddings folders (or Parquet datasets of your own vectors). Exact search up to
    200,000 vectors, a clustered search (SemDeDup-style, its recall measured) above."""

    INPUT_OPTIONS = ("embeddings", "known_pairs")
    DOCS = ("docs/memory-and-disk.md", "docs/incremental.md")

    embeddings: tuple[str, ...] = option(
        help="embeddings output directories (one model; several are searched together)",
        required=True,
        metavar="DIR",
    )
    output: str = output_option()
    k: int = option(10, "neighbours per item (default 10)")
    threshold: float | None = option(
        help="also write every pair with cosine >= T to pairs/ (a cosine, in [-1, 1])",
        metavar="T",
    )
    method: Literal["auto", "exact", "clustered"] = option(
        "auto", "auto: exact up to 200,000 vectors (when it fits --worker-memory), clustered above"
    )
    clusters: int | None = option(
        help="clustered: k-means centroids (default about sqrt(N), at least 4k items each)",
        advanced=True,
    )
    nprobe: int | None = option(
        help="clustered: blocks each vector joins (default: the fewest that reach --target-recall)",
        advanced=True,
    )
    target_recall: float = option(0.95, "clustered: recall@k that chooses --nprobe (default 0.95)")
    tune_sample: int = option(
        TUNE_SAMPLE,
        f"clustered: queries that choose --nprobe (default {TUNE_SAMPLE})",
        advanced=True,
    )
    max_block: int | None = option(
        help="clustered: clusters whose block would hold more vectors are split (default "
        f"{DEFAULT_MAX_BLOCK:,}, less if --worker-memory needs it)",
        advanced=True,
    )
    sample: int | None = kmeans_sample_option("clustered: ", SAMPLE_PER_CLUSTER, MIN_SAMPLE)
    iterations: int = kmeans_iterations_option()
    recall_sample: int = option(
        1000,
        "clustered: queries whose lists are checked against exact search (0: none)",
        advanced=True,
    )
    known_pairs: str | None = option(
        help="Parquet file with id_a, id_b columns (e.g. known duplicates): the manifest "
        "records how many of them the output found",
        metavar="FILE",
    )
    worker_memory: str = option(
        "4GB",
        "memory one worker may use, e.g. 16GiB (default 4GB): exact mode needs all vectors in "
        "each worker",
        metavar="SIZE",
    )
    memory_budget: str = memory_budget_option()
    ranges: int | None = option(
        help=f"exact: query ranges, one Beam element each (default one per {ROWS_PER_RANGE:,})",
        advanced=True,
    )
    shards: int | None = option(
        help=f"clustered: output shards (default one per {ROWS_PER_SHARD:,} items)",
        advanced=True,
    )
    seed: int = seed_option("k-means and recall sample seed")
    precision: Literal["auto", "bfloat16", "float32"] = option(
        "auto",
        "candidate pass of the exact search; results are the fp32 answer either way",
        advanced=True,
    )
    overwrite: bool = overwrite_option()
    incremental: bool = option(
        False,
        "reuse this folder's previous pairs: only rows of new or changed embeddings parts are "
        "searched (a full run when the settings or the model changed)",
    )
    verify: bool = verify_option()
    beam_options: Any = beam_options_option()

    def check(self) -> None:
        """Refuse values that cannot work, before any input is read (the ``--known-pairs``
        file must exist)."""
        at_least("k", self.k, 1)
        in_range("threshold", self.threshold, -1.0, 1.0)
        for name in (*CLUSTERED_ONLY, *EXACT_ONLY):
            at_least(name, getattr(self, name), 1)
        at_least("iterations", self.iterations, 1)
        at_least("recall_sample", self.recall_sample, 0)
        at_least("tune_sample", self.tune_sample, 0)
        in_range("target_recall", self.target_recall, 0.0, 1.0, low_open=True)
        if self.nprobe is None and self.tune_sample == 0 and self.method != "exact":
            raise OptionError(
                "tune_sample", "0 leaves nothing to choose --nprobe with; give --nprobe"
            )
        self._check_method_options()
        self.worker_memory_bytes()
        self.budget()
        if self.known_pairs is not None and not FileSystems.exists(self.known_pairs):
            raise OptionError("known_pairs", f"{self.known_pairs}: no such file")

    def _check_method_options(self) -> None:
        """Refuse options of the other method than the one asked for."""
        other = {"exact": CLUSTERED_ONLY, "clustered": EXACT_ONLY}.get(self.method, ())
        given = [name for name in other if getattr(self, name) is not None]
        if given:
            mode = "clustered" if self.method == "exact" else "exact"
            others = ", ".join(f"--{name.replace('_', '-')}" for name in given[1:])
            also = f" (as do {others})" if others else ""
            raise OptionError(given[0], f"applies to --method {mode}{also}")

    def budget(self) -> MemoryBudget:
        """``memory_budget`` resolved (``auto``: a share of the memory available now)."""
        return checked_memory_budget(self.memory_budget)

    def worker_memory_bytes(self) -> int:
        """``worker_memory`` in bytes."""
        try:
            return parse_size(self.worker_memory)
        except ValueError as err:
            raise OptionError("worker_memory", str(err)) from None
