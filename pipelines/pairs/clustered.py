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
    start = time.perf_counter()
    truth = _sample_truth(settings, scan)
    seconds["exact_sample"] = time.perf_counter() - start

    start = time.perf_counter()
    plan, needed = _fit_blocks(settings, blocking, scan, options, truth)
    centroids_path = join(settings.output, CENTROIDS)
    save_centroids(centroids_path, plan.centroids)
    seconds["fit"] = time.perf_counter() - start

    n_shards = options.shards or math.ceil(scan.count / ROWS_PER_SHARD)
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
    recall = _sample_recall(settings, scan, truth)
    blocks, short_lists = _searched_blocks(settings.output, blocking.max_block)
    details = {
        "clusters": blocking.clusters,
        "nprobe": plan.nprobe,
        "nprobe_requested": blocking.nprobe,
        "target_recall": options.target_recall if blocking.nprobe is None else None,
        "max_block": blocking.max_block,
        "sample": {"requested": options.sample, "used": len(scan.picked["fit"][2])},
        "tuning_queries": len(scan.picked["tune"][0]),
        **plan.describe(),
        "blocks": blocks,
        "block_groups": int(groups.max()) + 1,
        "output_shards": n_shards,
        "temporary_disk_bytes_estimated": needed,
        "short_lists": short_lists,
    }
    return details, finished, recall


@dataclass(frozen=True)
class _SampleTruth:
    """The exact top-k of the tuning queries, then the recall queries (in that order)."""

    topk: ExactTopK
    scores: np.ndarray
    ids: list[list[str]]


def _sample_truth(settings: PairsSettings, scan: Scan) -> _SampleTruth:
    """Search every vector exactly for the sample queries (one streamed pass)."""
    tune_rows, _, tune_queries = scan.picked["tune"]
    recall_rows, _, recall_queries = scan.picked["recall"]
    truth = ExactTopK(
        np.concatenate([tune_queries, recall_queries]),
        settings.k,
        exclude_rows=np.concatenate([tune_rows, recall_rows]),
        keep_vectors=True,
    )
    with stage_progress(TRUTH_PROGRESS, total=scan.count, unit="vectors") as bar:
        for ids, vectors in settings.reader.batches():
            truth.add(vectors, ids)
            bar.update(len(ids))
    true_scores, _ = truth.result()
    return _SampleTruth(truth, true_scores, truth.neighbor_ids())


def _fit_blocks(
    settings: PairsSettings,
    blocking: Blocking,
    scan: Scan,
    options: ClusteredOptions,
    truth: _SampleTruth,
) -> tuple[BlockPlan, int]:
    """The fitted centroids and ``nprobe`` (tuned on the tuning queries' truth), once the
    temporary disk the blocked search needs is known to be free: ``(plan, disk bytes)``.

    Raises:
        ResourceError: the output's disk has not the room the blocked search needs.
    """
    n, k, dim = scan.count, settings.k, settings.reader.dim
    tune_rows, _, tune_queries = scan.picked["tune"]
    tuning = None
    if len(tune_rows):
        tuning = ProbeTuning(
            tune_queries, truth.topk.neighbor_vectors()[: len(tune_rows)], options.target_recall
        )
    _, _, sample = scan.picked["fit"]
    plan = _plan(settings, blocking, options, sample, n, tuning)
    needed = clustered_disk_bytes(n, scan.id_bytes, dim, plan.nprobe, k)
    require_disk(
        needed,
        join(settings.output, WORK_DIR),
        f"clustered pairs of {n:,} vectors of {dim} float32 (each stored once, "
        f"listed in {plan.nprobe} blocks, with their candidate lists)",
        "use --nprobe 1 or a lower --target-recall (fewer blocks per vector), or --output on "
        "a larger disk",
    )
    return plan, needed


def _sample_recall(settings: PairsSettings, scan: Scan, truth: _SampleTruth) -> float | None:
    """Recall@k of the written lists on the recall queries (None without any)."""
    n_tune = len(scan.picked["tune"][0])
    recall_rows, recall_ids, _ = scan.picked["recall"]
    if not len(recall_rows):
        return None
    table = read_neighbors(settings.output, recall_ids)
    found = {row["id"]: (row["neighbor_ids"], row["scores"]) for row in table.to_pylist()}
    return recall_at_k(
        [found[i][0] for i in recall_ids],
        truth.ids[n_tune:],
        settings.k,
        found_scores=[found[i][1] for i in recall_ids],
        true_scores=truth.scores[n_tune:],
    )


def _searched_blocks(output: str, max_block: int) -> tuple[dict, int]:
    """The searched blocks' sizes and the number of short lists, from the workers' reports."""
    reports = read_reports(output)
    sizes = np.array([size for report in reports for _, size in report["blocks"]], np.int64)
    blocks = {
        "searched": len(sizes),
        "largest": int(sizes.max()) if len(sizes) else 0,
        "mean": float(sizes.mean()) if len(sizes) else 0.0,
        "over_cap": int(np.sum(sizes > max_block)),
        "vectors_searched": int(sizes.sum()),
    }
    return blocks, sum(report["short_lists"] for report in reports)


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
