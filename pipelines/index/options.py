"""Options of the index stage (``sbert index``, ``sbert run``'s ``index:``, ``index.Options``).

Beam-free: the command line is generated from these fields (``jobs/options_cli.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sbert_pipeline.io.resources import MemoryBudget
from sbert_pipeline.stage_api.options import at_least, in_range, option
from sbert_pipeline.stage_api.shared_options import (
    ExternalVectorOptions,
    beam_options_option,
    checked_memory_budget,
    memory_budget_option,
    output_option,
    overwrite_option,
    seed_option,
    verify_option,
)


@dataclass(frozen=True)
class Options(ExternalVectorOptions):
    """Build a FAISS index of an embeddings folder for sbert search: the index type is chosen to
    fit --memory-budget, and its search parameter tuned to reach --target-recall."""

    INPUT_OPTIONS = ("embeddings",)
    DOCS = ("docs/memory-and-disk.md", "docs/incremental.md")

    embeddings: str = option(
        help="an sbert embed output directory (or, with --embedding-field, a Parquet dataset)",
        required=True,
        metavar="DIR",
    )
    output: str = output_option("index output directory")
    factory: str = option(
        "auto",
        "'auto' (choose under --memory-budget) or a FAISS index_factory string",
        metavar="SPEC",
    )
    # The whole process: the index, its training sample, the trial, the queries, the batches.
    memory_budget: str = memory_budget_option()
    target_recall: float = option(
        0.95, "recall@10 the search parameter is tuned to reach (default 0.95)"
    )
    metric: Literal["ip", "l2"] = option(
        "ip", "ip: cosine (vectors are L2-normalised), l2: Euclidean (default ip)"
    )
    train_sample: int | None = option(help="training vectors (default: by index)", advanced=True)
    trial_sample: int | None = option(
        help="with --factory auto, when both HNSW and IVF-Flat fit the budget, build both on "
        "this many vectors and keep the faster at the target recall (default: N/4, at least "
        "100k, at most 1M; 0: take the planner's first choice)",
        advanced=True,
    )
    queries: int = option(
        1000, "held-out vectors for tuning and the recall estimate (default 1000)", advanced=True
    )
    # 16k rows: adding is as fast as with 64k, and the fill holds 0.3 GiB less (2M x 384).
    batch_size: int = option(16384, "vectors read and added per step", advanced=True)
    seed: int = seed_option("for the training and query sample")
    shards: int | None = option(
        help="fill S shards in a Beam pipeline and merge them (default: one process, no Beam)"
    )
    incremental: bool = option(
        False,
        "reuse the previous index in --output: update its rows, and retrain only when recall@10 "
        "on held-out new rows falls below --target-recall",
    )
    overwrite: bool = overwrite_option()
    verify: bool = verify_option()
    beam_options: Any = beam_options_option()

    def check(self) -> None:
        """Refuse bad values before any input is read."""
        in_range("target_recall", self.target_recall, 0.0, 1.0, low_open=True)
        at_least("trial_sample", self.trial_sample, 0)
        at_least("queries", self.queries, 1)
        at_least("batch_size", self.batch_size, 1)
        at_least("shards", self.shards, 1)
        at_least("train_sample", self.train_sample, 1)
        self.budget()

    def budget(self) -> MemoryBudget:
        """``memory_budget`` resolved (``auto``: a share of the memory available now)."""
        return checked_memory_budget(self.memory_budget)

    def memory_budget_bytes(self) -> int:
        """``memory_budget`` in bytes."""
        return self.budget().bytes
