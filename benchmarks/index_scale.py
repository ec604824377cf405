"""The index stage at scale under a memory budget: ours (``sbert index --factory auto``) vs plain
FAISS building the same factory, on planted vectors read from disk.

``--n`` planted unit vectors (``benchmarks.index.planted_vectors``: ``--clusters`` Gaussian
clusters, noise ``--spread``) are written as an embeddings folder (Parquet, in chunks, so the
generator never holds them all). Then, each in its own process so that its peak RSS is its own:

- ours: ``python -m sbert_pipeline.jobs.cli index --memory-budget B``: the planner picks the
factory under the
  budget (counting the whole process), trains on a sample, fills in batches, tunes nprobe /
  efSearch to ``--target`` recall@10 on held-out rows; its manifest records the peak RSS;
- plain FAISS: ``faiss.index_factory`` of the factory ours chose, trained on the same number of
  random rows, filled with the same batches, searched with ours' tuned parameters.

Reported for both: build seconds (process start to index written, imports included), peak RSS
against the budget, recall@10 of ``--queries`` fresh planted queries (same clusters, another
draw) against the exact answer (streamed over the corpus). JSON under
``benchmarks/results/index_scale_n<N>.json``.

    python -m benchmarks.index_scale [--n 10000000] [--memory-budget 4GB] [--dim 384]
        [--clusters 1000] [--spread 1.0] [--queries 1000] [--target 0.95] [--work DIR] [--keep]
        [--skip-plain]

``--skip-plain`` builds only ours (the planner's choice, tuned, its recall and peak RSS
reported): the plain-FAISS build of the same factory doubles a 10M run.

10M x 384 is 15 GB of Parquet and about as much reading per pass; on a laptop use ``--n``.
The last line is ``ours/plain FAISS build time ratio (same factory): X``.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from sbert_pipeline.io.schemas import embeddings_table
from sbert_pipeline.io.sizes import format_size, parse_size

from benchmarks.common import ROOT, write_result
from benchmarks.index import planted_chunks, planted_vectors
from benchmarks.parser import benchmark_parser

K = 10
CHUNK = 100_000  # rows generated and written at a time
MODEL = {
    "kind": "embeddings",
    "model_id": "planted-gaussians",
    "weights_sha256": "0" * 64,
    "pooling": "mean",
    "normalized": True,
    "max_seq_length": 128,
    "dtype": "float32",
    "keep_text": False,
}


def write_planted(folder: Path, args) -> None:
    """The planted corpus as an embeddings folder, one shard per ``CHUNK`` rows."""
    folder.mkdir(parents=True)
    chunks = planted_chunks(args.n, args.dim, args.clusters, args.spread, args.seed, 0, CHUNK)
    names, start = [], 0
    for shard, block in enumerate(chunks):
        rows = len(block)
        ids = [f"v{i}" for i in range(start, start + rows)]
        table = embeddings_table(ids, block, np.zeros(rows, np.int32), np.zeros(rows, bool))
        names.append(f"part-{shard:05d}.parquet")
        pq.write_table(table, folder / names[-1], row_group_size=8192)
        start += rows
    counts = {"read": args.n, "embedded": args.n, "rejected": 0}
    manifest = {**MODEL, "dim": args.dim, "counts": counts, "shards": names}
    (folder / "_manifest.json").write_text(json.dumps(manifest))


def exact_truth(folder: Path, queries: np.ndarray) -> np.ndarray:
    """Corpus rows of each query's exact top-10, streamed over the corpus."""
    from sbert_pipeline.io.embeddings import EmbeddingsDataset
    from sbert_pipeline.vectors.exact_truth import ExactTopK

    exact = ExactTopK(queries, K, metric="ip", kernel="faiss")
    for _, vectors in EmbeddingsDataset.open(str(folder)).batches():
        exact.add(vectors)
    return exact.result()[1]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """recall@10 of corpus rows ``found`` against ``truth``."""
    from sbert_pipeline.vectors.exact_truth import recall_at_k

    return recall_at_k(found, truth, K)


def run_ours(corpus: Path, output: Path, args) -> dict:
    """``sbert index`` in a subprocess; the facts of its manifest and its wall time."""
    command = [
        sys.executable,
        "-m",
        "sbert_pipeline.jobs.cli",
        "index",
        "--embeddings",
        str(corpus),
    ]
    command += ["--output", str(output), "--memory-budget", args.memory_budget]
    command += ["--target-recall", str(args.target), "--seed", str(args.seed)]
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    seconds = time.perf_counter() - start
    manifest = json.loads((output / "_manifest.json").read_text())
    return {
        "factory": manifest["factory"],
        "build_s": seconds,
        "stage_s": manifest["total_seconds"],
        "peak_rss_bytes": manifest["peak_rss_bytes"],
        "budget_bytes": manifest["memory_budget"]["bytes"],
        "planned_bytes": (manifest["plan"] or {}).get("process", {}).get("parts"),
        "search_params": manifest["search_params"],
        "train_sample": manifest["train_sample"],
        "held_out_recall_at_10": manifest["recall_at_10"],
        "size_bytes": manifest["size_bytes"],
    }


def ours_recall(output: Path, queries: np.ndarray, truth: np.ndarray) -> float:
    """recall@10 of the published index on the fresh queries (positions mapped to rows)."""
    from sbert_pipeline.index.files import open_index

    loaded = open_index(str(output), verify_checksums=False)
    _, positions = loaded.index.search(queries, K)
    ids, _ = loaded.ids.lookup(positions.ravel())
    return recall(np.array([int(i[1:]) for i in ids]).reshape(positions.shape), truth)


def child_plain(args) -> None:
    """Plain FAISS in this process: train on random rows, add the batches, search; one JSON line."""
    import faiss
    from sbert_pipeline.index.build import gather_rows
    from sbert_pipeline.index.faiss_ops import set_search_params
    from sbert_pipeline.io.embeddings import EmbeddingsDataset

    start = time.perf_counter()
    data = EmbeddingsDataset.open(args.corpus)
    index = faiss.index_factory(data.dim, args.factory, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        rng = np.random.default_rng(args.seed)
        rows = np.sort(rng.choice(data.count, size=args.train, replace=False))
        index.train(gather_rows(data, rows, 65536))
    for _, vectors in data.batches():
        index.add(vectors)
    seconds = time.perf_counter() - start
    set_search_params(index, json.loads(args.params))
    _, found = index.search(np.load(args.queries_file), K)
    result = {
        "factory": args.factory,
        "build_s": seconds,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "recall_at_10": recall(found, np.load(args.truth_file)),
    }
    print(json.dumps(result))


def run_plain(corpus: Path, work: Path, ours: dict, args) -> dict:
    """:func:`child_plain` in a subprocess (build time includes its start and imports)."""
    command = [sys.executable, "-m", "benchmarks.index_scale", "--child", "--corpus", str(corpus)]
    command += ["--factory", ours["factory"], "--train", str(max(ours["train_sample"], 1))]
    command += ["--params", json.dumps(ours["search_params"]), "--seed", str(args.seed)]
    command += ["--queries-file", str(work / "queries.npy")]
    command += ["--truth-file", str(work / "truth.npy")]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "build_s": time.perf_counter() - start, "in_process_s": result["build_s"]}


def main() -> None:
    parser = benchmark_parser(__doc__, 10_000_000)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=1.0)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--memory-budget", default="4GB")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--work", default=None, help="folder for the data (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the data and the index")
    parser.add_argument(
        "--skip-plain",
        action="store_true",
        help="build only ours (the plain-FAISS build of the same factory doubles a 10M run)",
    )
    for name in ("--corpus", "--factory", "--train", "--params", "--queries-file", "--truth-file"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.train = int(args.train)
        child_plain(args)
        return

    parse_size(args.memory_budget)  # a bad size fails before the data is written
    work = Path(tempfile.mkdtemp(prefix="index_scale_", dir=args.work))
    try:
        corpus, output = work / "embeddings", work / "index"
        start = time.perf_counter()
        write_planted(corpus, args)
        print(
            f"wrote {args.n:,} x {args.dim} planted vectors in {time.perf_counter() - start:.0f} s"
        )
        queries = planted_vectors(args.queries, args.dim, args.clusters, args.spread, args.seed, 1)
        truth = exact_truth(corpus, queries)
        np.save(work / "queries.npy", queries)
        np.save(work / "truth.npy", truth)
        ours = run_ours(corpus, output, args)
        ours["recall_at_10"] = ours_recall(output, queries, truth)
        plain = None if args.skip_plain else run_plain(corpus, work, ours, args)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    ratio = ours["build_s"] / plain["build_s"] if plain else None
    path = write_result(
        f"index_scale_n{args.n}",
        {
            "n": args.n,
            "dim": args.dim,
            "data": {"clusters": args.clusters, "spread": args.spread},
            "queries": args.queries,
            "target_recall": args.target,
            "memory_budget": args.memory_budget,
            "ours": ours,
            "plain_faiss": plain if plain else "not run (--skip-plain)",
            "ratios": {"build_time_vs_plain_faiss": ratio},
            "targets_met": {
                "recall": ours["recall_at_10"] >= args.target,
                "peak_rss_within_budget": ours["peak_rss_bytes"] <= ours["budget_bytes"],
            },
        },
    )
    budget = ours["budget_bytes"]
    for name, entry in (("ours", ours), ("plain FAISS", plain)) if plain else (("ours", ours),):
        print(
            f"{name:<12} {entry['factory']:<24} build {entry['build_s']:8.1f} s  recall@10 "
            f"{entry['recall_at_10']:.3f}  peak RSS {format_size(entry['peak_rss_bytes'])} "
            f"({entry['peak_rss_bytes'] / budget:.2f} of the {format_size(budget)} budget)"
        )
    print(f"results: {path}")
    if ratio is None:
        share = ours["peak_rss_bytes"] / budget
        print(f"ours: peak RSS / budget {share:.2f} (plain FAISS not run)")
    else:
        print(f"ours/plain FAISS build time ratio (same factory): {ratio:.2f}")


if __name__ == "__main__":
    main()
