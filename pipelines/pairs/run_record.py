"""What a finished pairs run reports: its one-line summary and its ``_manifest.json``."""

from __future__ import annotations

from dataclasses import dataclass

from sbert_pipeline.io.embeddings import version_digest
from sbert_pipeline.io.manifest_fields import created_now, model_fields, software_versions
from sbert_pipeline.io.pairs_output import VERSION_DIGEST
from sbert_pipeline.pairs.options import Options
from sbert_pipeline.pairs.vector_reader import VectorReader


@dataclass(frozen=True)
class PairsSummary:
    """What a finished pairs run reports."""

    output: str
    method: str
    items: int
    k: int
    threshold: float | None
    pairs: int
    recall: float | None
    seconds: float
    incremental: dict | None = None  # the manifest's section of an incremental run

    def line(self) -> str:
        """One-line human summary."""
        pairs = f", {self.pairs} pairs >= {self.threshold}" if self.threshold is not None else ""
        if self.incremental is not None:
            done = self.incremental
            pairs += (
                f"; incremental: {done['rows_new']} new rows searched, {done['rows_old']} "
                f"reused, {done['rows_gone']} gone"
            )
        if self.method == "exact":
            recall = "exact"
        elif self.recall is None:
            recall = "recall not measured"
        else:
            recall = f"recall@{self.k} {self.recall:.3f} on a sample"
        return (
            f"top-{self.k} neighbours of {self.items} embeddings ({self.method}, {recall}){pairs} "
            f"in {self.seconds:.1f}s -> {self.output}"
        )


def pairs_manifest(
    options: Options,
    datasets: list,
    summary: PairsSummary,
    reader: VectorReader,
    budget: int,
    details: dict,
    runner: str,
    seconds: dict,
) -> dict:
    """The ``_manifest.json`` of a finished run (model fields first, for later stages' checks)."""
    first = datasets[0].manifest
    clustered = summary.method == "clustered"
    if summary.method == "exact":
        recall = {"measured": False, "why": "exact search: every list is the exact top-k"}
    else:
        queries = min(options.recall_sample, summary.items)
        recall = {
            "measured": summary.recall is not None,
            "queries": queries,
            "seed": options.seed,
            "definition": "mean over random queries of |found neighbours that are among the "
            "exact top-k (or tie with its k-th score)| / k; exact = fp32 search of all vectors",
        }
    if options.threshold is None:
        completeness = None
    elif clustered:
        completeness = "every pair >= threshold that shares a cluster block (see recall_at_k)"
    else:
        completeness = "every pair >= threshold (exact)"
    return {
        "kind": "pairs",
        **model_fields(first),
        "method": summary.method,
        "method_requested": options.method,
        "k": options.k,
        "threshold": options.threshold,
        "recall_at_k": None if summary.recall is None else round(summary.recall, 6),
        "recall": recall,
        "pairs": {"count": summary.pairs, "threshold": options.threshold, "complete": completeness},
        "counts": {
            "items": summary.items,
            "neighbor_rows": summary.items,
            "short_lists": details.get("clustered", {}).get("short_lists", 0),
            "pairs": summary.pairs,
        },
        "normalized_here": reader.normalize,
        "worker_memory_bytes": budget,
        **details,
        "precision": options.precision,
        "seed": options.seed,
        # Each input's version too, so verify and dedup refuse embeddings made again since.
        "embeddings": [
            {
                "directory": dataset.directory,
                "manifest": dataset.manifest,
                VERSION_DIGEST: version_digest(dataset.manifest),
            }
            for dataset in datasets
        ],
        "runner": runner,
        "software": software_versions(),
        "seconds": round(summary.seconds, 3),
        "seconds_parts": {name: round(value, 3) for name, value in seconds.items()},
        "created": created_now(),
    }
