"""FAISS index: ours (``auto`` under a memory budget, tuned to a recall target) vs plain FAISS.

Contenders, on the same vectors, the same queries and the same threads:

- ours: ``sbert_pipeline.index.planner`` picks the factory for N, d and ``--budget``; when HNSW and
  IVF-Flat both fit, ``sbert_pipeline.index.trial`` builds both on a sample and keeps the one
  predicted faster at the target (timed as part of our build); ``sbert_pipeline.index.build``
  trains on a sample, adds in batches, and tunes nprobe/efSearch to the smallest value
  reaching ``--target`` recall@10 on held-out rows (all timed).
- ``HNSW32``: ``faiss.index_factory(d, "HNSW32", METRIC_INNER_PRODUCT)``, add, efSearch 16.
- ``IVF4096,Flat``: train on all vectors (FAISS subsamples 256 per list), add, nprobe 1.

For each: build seconds, index bytes (the serialised size, which is what the index occupies in
memory), recall@10 of ``--queries`` queries against exact search (``IndexFlatIP``), and
queries/s (batch search of all queries). Each baseline is also run at the smallest
efSearch/nprobe that matches our recall ("at equal recall"); that value is picked on the test
queries themselves, which favours the baselines. All settings are timed at the end,
interleaved (``--repeats`` rounds, median), so that load changes on the machine hit every
contender alike; all three indexes are then in memory at once (~5.5 GB at 1M x 384).

    python -m benchmarks.index --n 1000000 [--dim 384] [--budget 2GB] [--target 0.95]
    python -m benchmarks.index --embeddings out/embeddings   # held-out rows are the queries

Planted data: ``--clusters`` Gaussian clusters of unit vectors (noise ``--spread`` times the
centre scale), generated in chunks; the queries are fresh draws from the same clusters. The
last line is ``ours/best-baseline queries/s ratio at equal recall: X``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import faiss
import numpy as np
from sbert_pipeline.index.build import ArraySource, BuildSettings, build_index
from sbert_pipeline.index.faiss_ops import set_search_params
from sbert_pipeline.index.planner import plan_index
from sbert_pipeline.index.trial import choose_by_trial
from sbert_pipeline.index.tuning import search_parameter, tune_search_parameter
from sbert_pipeline.io.sizes import format_size, parse_size
from sbert_pipeline.vectors.exact_truth import recall_at_k

from benchmarks.common import interleaved_medians, write_result
from benchmarks.parser import benchmark_parser

K = 10
BASELINES = ("HNSW32", "IVF4096,Flat")


def planted_chunks(
    n: int, dim: int, clusters: int, spread: float, seed: int, draw: int, chunk: int = 100_000
) -> Iterator[np.ndarray]:
    """:func:`planted_vectors` as ``chunk``-row pieces, in order (for data larger than memory)."""
    centres = np.random.default_rng(seed).standard_normal((clusters, dim)).astype(np.float32)
    rng = np.random.default_rng([seed, draw + 1])
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        labels = rng.integers(0, clusters, stop - start)
        block = centres[labels] + spread * rng.standard_normal((stop - start, dim), np.float32)
        yield block / np.linalg.norm(block, axis=1, keepdims=True)


def planted_vectors(
    n: int, dim: int, clusters: int, spread: float, seed: int, draw: int, chunk: int = 100_000
) -> np.ndarray:
    """``n`` unit vectors around ``clusters`` centres; ``draw`` picks fresh points, same centres."""
    out = np.empty((n, dim), dtype=np.float32)
    start = 0
    # Bounded temporaries: 1M x 384 is 1.5 GB already.
    for block in planted_chunks(n, dim, clusters, spread, seed, draw, chunk):
        out[start : start + len(block)] = block
        start += len(block)
    return out


def real_vectors(directory: str, n_queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """An ``sbert embed`` output, normalised, split into corpus and held-out query rows."""
    from sbert_pipeline.io.embeddings import EmbeddingsDataset

    _, vectors = EmbeddingsDataset.open(directory).load()
    faiss.normalize_L2(vectors)
    held_out = np.zeros(len(vectors), dtype=bool)
    held_out[np.random.default_rng(seed).choice(len(vectors), n_queries, replace=False)] = True
    return vectors[~held_out], vectors[held_out]


def stored_bytes(index: faiss.Index) -> int:
    """Serialised size of an index, counted without keeping a copy."""
    size = 0

    def count(chunk: bytes) -> int:
        nonlocal size
        size += len(chunk)
        return len(chunk)

    writer = faiss.PyCallbackIOWriter(count)
    faiss.write_index(index, writer)
    del writer
    return size


def recall_of(index, params: dict, queries, truth, rows=None) -> float:
    """recall@10 against ``truth`` with ``params`` set; ``rows`` maps positions to corpus rows."""
    set_search_params(index, params)
    _, found = index.search(queries, K)
    return recall_at_k(found if rows is None else rows(found), truth, K)


def build_ours(corpus, queries, truth, args):
    plan = plan_index(len(corpus), corpus.shape[1], "ip", parse_size(args.budget))
    start = time.perf_counter()
    # What `sbert index --factory auto` does: plan, then a trial when HNSW and IVF-Flat both fit.
    trial = choose_by_trial(ArraySource(corpus), plan, args.target, seed=args.seed)
    trial_s = time.perf_counter() - start
    chosen = trial.chosen if trial else plan.chosen
    print(f"ours: {chosen.factory}, estimated {format_size(chosen.bytes)}, trial {trial_s:.1f} s")
    built = build_index(
        ArraySource(corpus),
        BuildSettings(chosen.factory, target_recall=args.target, seed=args.seed),
    )
    params = built.tuning.search_params
    entry = {
        "factory": chosen.factory,
        "trial": trial.to_json() if trial else None,
        "trial_s": trial_s,
        "build_s": time.perf_counter() - start,
        "build_parts_s": built.seconds,
        "index_bytes": stored_bytes(built.index),
        "estimated_bytes": chosen.bytes,
        "budget_bytes": plan.budget_bytes,
        "search_params": params,
        "held_out_recall_at_10": built.tuning.recall,
        "recall_at_10": recall_of(built.index, params, queries, truth, built.corpus_rows),
    }
    return built.index, entry


def build_baseline(factory, corpus, queries, truth, recall_to_match):
    start = time.perf_counter()
    index = faiss.index_factory(corpus.shape[1], factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        index.train(corpus)
    index.add(corpus)
    seconds = time.perf_counter() - start
    name, _, _ = search_parameter(index)
    ivf = faiss.try_extract_index_ivf(index)
    default = {name: int(ivf.nprobe if ivf is not None else index.hnsw.efSearch)}
    tuning = tune_search_parameter(index, queries, truth, recall_to_match)
    entry = {
        "factory": factory,
        "build_s": seconds,
        "index_bytes": stored_bytes(index),
        "default": {"search_params": default},
        "at_equal_recall": {"search_params": tuning.search_params, "reached": tuning.reached},
    }
    for setting in ("default", "at_equal_recall"):
        params = entry[setting]["search_params"]
        entry[setting]["recall_at_10"] = recall_of(index, params, queries, truth)
    return index, entry


def main() -> None:
    parser = benchmark_parser(__doc__, 1_000_000)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--embeddings", default=None, help="use an embed output instead")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--budget", default="2GB")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--repeats", type=int, default=5, help="timing rounds (median)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()

    faiss.omp_set_num_threads(args.threads)
    if args.embeddings:
        corpus, queries = real_vectors(args.embeddings, args.queries, args.seed)
        name, kind = "index_embeddings", "held-out rows"
    else:
        corpus = planted_vectors(args.n, args.dim, args.clusters, args.spread, args.seed, 0)
        queries = planted_vectors(args.queries, args.dim, args.clusters, args.spread, args.seed, 1)
        name, kind = f"index_n{args.n}", "fresh planted"
    print(f"{len(corpus)} x {corpus.shape[1]} vectors, {len(queries)} queries ({kind})")
    _, truth = faiss.knn(queries, corpus, K, metric=faiss.METRIC_INNER_PRODUCT)

    our_index, ours = build_ours(corpus, queries, truth, args)
    indexes, baselines = {}, {}
    for factory in BASELINES:
        indexes[factory], baselines[factory] = build_baseline(
            factory, corpus, queries, truth, ours["recall_at_10"]
        )

    def searching(index, params):
        def search():
            set_search_params(index, params)
            index.search(queries, K)

        return search

    contenders = {"ours": searching(our_index, ours["search_params"])}
    for factory, entry in baselines.items():
        for setting in ("default", "at_equal_recall"):
            params = entry[setting]["search_params"]
            contenders[f"{factory} {setting}"] = searching(indexes[factory], params)
    timings = interleaved_medians(contenders, args.repeats)
    ours["queries_per_s"] = len(queries) / timings["ours"]["median_s"]
    for factory, entry in baselines.items():
        for setting in ("default", "at_equal_recall"):
            median = timings[f"{factory} {setting}"]["median_s"]
            entry[setting]["queries_per_s"] = len(queries) / median

    best = max(baselines, key=lambda f: baselines[f]["at_equal_recall"]["queries_per_s"])
    best_qps = baselines[best]["at_equal_recall"]["queries_per_s"]
    ratios = {
        "qps_vs_best_baseline_at_equal_recall": ours["queries_per_s"] / best_qps,
        "build_time_vs_best_baseline": ours["build_s"] / baselines[best]["build_s"],
        "bytes_vs_best_baseline": ours["index_bytes"] / baselines[best]["index_bytes"],
    }
    path = write_result(
        name,
        {
            "n": len(corpus),
            "dim": int(corpus.shape[1]),
            "data": args.embeddings or {"clusters": args.clusters, "spread": args.spread},
            "queries": len(queries),
            "threads": args.threads,
            "repeats": args.repeats,
            "target_recall": args.target,
            "ours": ours,
            "baselines": baselines,
            "timings": timings,
            "best_baseline": best,
            "ratios": ratios,
            "targets_met": {
                "recall": ours["recall_at_10"] >= args.target,
                "qps_at_equal_recall": ratios["qps_vs_best_baseline_at_equal_recall"] >= 1.0,
                "within_budget": ours["index_bytes"] <= ours["budget_bytes"],
            },
        },
    )

    def row(label: str, build_s: float, size: int, entry: dict) -> str:
        return (
            f"{label:<34} build {build_s:7.1f} s  {format_size(size):>11}  recall@10 "
            f"{entry['recall_at_10']:.3f}  {entry['queries_per_s']:9.0f} q/s  "
            f"{entry['search_params']}"
        )

    print(row(f"ours ({ours['factory']})", ours["build_s"], ours["index_bytes"], ours))
    for factory, entry in baselines.items():
        for setting in ("default", "at_equal_recall"):
            label = f"{factory} ({setting.replace('_', ' ')})"
            print(row(label, entry["build_s"], entry["index_bytes"], entry[setting]))
    print(f"results: {path}")
    print(f"ours/{best} build time ratio: {ratios['build_time_vs_best_baseline']:.2f}")
    print(f"ours/{best} index size ratio: {ratios['bytes_vs_best_baseline']:.2f}")
    print(
        "ours/best-baseline queries/s ratio at equal recall: "
        f"{ratios['qps_vs_best_baseline_at_equal_recall']:.2f}"
    )


if __name__ == "__main__":
    main()
