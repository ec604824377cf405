"""The clustered mode's run: exact truth for the sample queries, the block plan (k-means on the
sample, nprobe tuned to a target recall), the blocked search in Beam, and its measured recall
(the pipeline itself is described in ``pipelines/pairs/transforms.py``)."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.io.centroids import CENTROIDS, save_centroids
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.io.pairs_output import read_neighbors
from sbert_pipeline.io.resources import require_disk
from sbert_pipeline.pairs.defaults import ROWS_PER_SHARD
from sbert_pipeline.pairs.exact import FinishedRun, RunTransform
from sbert_pipeline.pairs.group_progress import group_progress
from sbert_pipeline.pairs.plan import MIN_GROUPS, Blocking, clustered_disk_bytes
from sbert_pipeline.pairs.settings import WORK_DIR
from sbert_pipeline.pairs.transforms import ClusterBlockedPairs, PairsSettings, read_reports
from sbert_pipeline.pairs.vector_reader import Scan
from sbert_pipeline.vectors.block_plan import BlockPlan, ProbeTuning, group_blocks, plan_blocks
from sbert_pipeline.vectors.exact_truth import ExactTopK, recall_at_k
from sbert_pipeline.vectors.progress import stage_progress

logger = logging.getLogger(__name__)

TRUTH_PROGRESS = "pairs: exact neighbours of the sample queries"


@dataclass(frozen=True)
class ClusteredOptions:
    """The clustered mode's options besides the blocking (``sbert pairs`` names)."""

    target_recall: float
    iterations: int
    seed: int
    shards: int | None  # output shards; None: one per 100,000 items
    sample: int | None  # the k-means sample as requested, for the manifest


def run_clustered(
    settings: PairsSettings,
    blocking: Blocking,
    scan: Scan,
    options: ClusteredOptions,
    run: RunTransform,
    seconds: dict[str, float],
) -> tuple[dict, FinishedRun, float | None]:
    """Exact truth for the sample queries, blocks, the blocked search, its recall.

    Writes ``centroids.npy`` and the outputs into ``settings.output``; adds the time of each
    part to ``seconds``. Returns ``(manifest details, the finished run, recall or None)``.
    """
    k, n = settings.k, scan.count
    start = time.perf_counter()
    tune_rows, _, tune_queries = scan.picked["tune"]
    recall_rows, recall_ids, recall_queries = scan.picked["recall"]
    truth = ExactTopK(
        np.concatenate([tune_queries, recall_queries]),
        k,
        exclude_rows=np.concatenate([tune_rows, recall_rows]),
        keep_vectors=True,
    )
    with stage_progress(TRUTH_PROGRESS, total=n, unit="vectors") as bar:
        for ids, vectors in settings.reader.batches():
            truth.add(vectors, ids)
            bar.update(len(ids))
    true_scores, _ = truth.result()
    true_ids = truth.neighbor_ids()
    seconds["exact_sample"] = time.perf_counter() - start

    start = time.perf_counter()
    tuning = None
    if len(tune_rows):
        tuning = ProbeTuning(
            tune_queries, truth.neighbor_vectors()[: len(tune_rows)], options.target_recall
        )
    _, _, sample = scan.picked["fit"]
    plan = _plan(settings, blocking, options, sample, n, tuning)
    needed = clustered_disk_bytes(n, scan.id_bytes, settings.reader.dim, plan.nprobe, k)
    require_disk(
        needed,
        join(settings.output, WORK_DIR),
        f"clustered pairs of {n:,} vectors of {settings.reader.dim} float32 (each stored once, "
        f"listed in {plan.nprobe} blocks, with their candidate lists)",
        "use --nprobe 1 or a lower --target-recall (fewer blocks per vector), or --output on "
        "a larger disk",
    )
    centroids_path = join(settings.output, CENTROIDS)
    save_centroids(centroids_path, plan.centroids)
    seconds["fit"] = time.perf_counter() - start

    n_shards = options.shards or math.ceil(n / ROWS_PER_SHARD)
    groups = group_blocks(
        plan.estimated_sizes, blocking.group_rows, min_groups=min(MIN_GROUPS, len(plan.centroids))
    )
    transform = ClusterBlockedPairs(
        settings,
        centroids_path,
        nprobe=plan.nprobe,
        groups=groups,
        n_shards=n_shards,
        max_block=blocking.max_block,
    )
    with group_progress(settings.output, int(groups.max()) + 1):
        finished = run("ClusterBlockedPairs", transform)
    seconds["pipeline"] = finished.seconds
    recall = None
    if len(recall_rows):
        table = read_neighbors(settings.output, recall_ids)
        found = {row["id"]: (row["neighbor_ids"], row["scores"]) for row in table.to_pylist()}
        recall = recall_at_k(
            [found[i][0] for i in recall_ids],
            true_ids[len(tune_rows) :],
            k,
            found_scores=[found[i][1] for i in recall_ids],
            true_scores=true_scores[len(tune_rows) :],
        )
    reports = read_reports(settings.output)
    sizes = np.array([size for report in reports for _, size in report["blocks"]], np.int64)
    details = {
        "clusters": blocking.clusters,
        "nprobe": plan.nprobe,
        "nprobe_requested": blocking.nprobe,
        "target_recall": options.target_recall if blocking.nprobe is None else None,
        "max_block": blocking.max_block,
        "sample": {"requested": options.sample, "used": len(sample)},
        "tuning_queries": len(tune_rows),
        **plan.describe(),
        "blocks": {
            "searched": len(sizes),
            "largest": int(sizes.max()) if len(sizes) else 0,
            "mean": float(sizes.mean()) if len(sizes) else 0.0,
            "over_cap": int(np.sum(sizes > blocking.max_block)),
            "vectors_searched": int(sizes.sum()),
        },
        "block_groups": int(groups.max()) + 1,
        "output_shards": n_shards,
        "temporary_disk_bytes_estimated": needed,
        "short_lists": sum(report["short_lists"] for report in reports),
    }
    return details, finished, recall


def _plan(
    settings: PairsSettings,
    blocking: Blocking,
    options: ClusteredOptions,
    sample: np.ndarray,
    n: int,
    tuning: ProbeTuning | None,
) -> BlockPlan:
    """Fit the centroids on the sample and choose nprobe; log the choice (warn when short)."""
    plan = plan_blocks(
        sample,
        n,
        blocking.clusters,
        max_block=blocking.max_block,
        nprobe=blocking.nprobe,
        tuning=tuning,
        seed=options.seed,
        iterations=options.iterations,
        precision=settings.precision,
    )
    logger.info(
        "fitted %d clusters on %d rows (%d split into %d blocks); nprobe %d, predicted recall %s",
        blocking.clusters,
        len(sample),
        plan.split,
        len(plan.centroids),
        plan.nprobe,
        plan.choice.predicted_recall,
    )
    if plan.choice.reached is False and blocking.nprobe is None:
        logger.warning(
            "recall@%d %.3f at nprobe %d is below --target-recall %.3f: more probes would cost "
            "more than a quarter of the exact search; consider --method exact",
            settings.k,
            plan.choice.predicted_recall,
            plan.nprobe,
            options.target_recall,
        )
    return plan
