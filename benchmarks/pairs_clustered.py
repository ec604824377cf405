"""``sbert pairs --method clustered`` on planted vectors: time, peak memory and recall.

Data (seeded, generated in chunks, written once as an ``embeddings/`` dataset under
``--data-dir``): ``n - pairs`` background vectors and ``pairs`` planted near-duplicates.

- Background: ``--topics`` topics with lognormal sizes; a member is
  ``normalize(centre + SUB * basis_t z + NOISE * g / sqrt(d))`` with a random unit centre, a
  random 16-dimensional orthonormal basis per topic, ``z`` and ``g`` standard normal. Members of a
  topic have cosine ~0.45 on average and up to ~0.9 for close ``z``: neighbourhoods live in a
  low-dimensional space per topic, as in real sentence embeddings, and the topics do not match
  the job's k-means clusters in number or size.
- Planted pairs: a random background row ``x`` and its twin ``normalize(x + TWIN * g /
  sqrt(d))`` (cosine ~0.99); their ids go to ``known_pairs.parquet``, which the job is given
  with ``--known-pairs``, so that its manifest records the planted-pair recall.

The job runs in a child process (``sbert pairs`` through ``sbert_pipeline.jobs.stage_cli``, the
local FnApiRunner), so the reported peak RSS (``ru_maxrss`` of the child) is the job's own:
launcher, Beam runner and workers. Meanwhile this process lists the output folder's ``_work``
files every 0.2 s: their largest total is the temporary disk peak, reported against the
vectors' size (``n * dim * 4``).
There is no competitor for the clustered mode at 1M on this machine: exact search of 1M x 1M
would take hours on two cores. The job itself compares with exact search on a random sample
of ``--recall-sample`` queries (the manifest's ``recall_at_k``); ``--extrapolate-exact`` also
times exact ``self_topk`` for a slice of query rows against all vectors and scales it to N.

    python -m benchmarks.pairs_clustered --n 100000
    python -m benchmarks.pairs_clustered --n 1000000 --extrapolate-exact

The last line gives the recall numbers.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import resource
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import write_result
from benchmarks.parser import benchmark_parser

SUB, NOISE, TWIN, SUBSPACE = 1.0, 0.5, 0.15, 16
CHUNK = 50_000  # rows generated (and written as one shard) at a time


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def write_planted(directory: Path, n: int, dim: int, topics: int, pairs: int, seed: int) -> dict:
    """Generate the planted dataset into ``directory`` (embeddings shards + manifest + pairs)."""
    from sbert_pipeline.io.schemas import embeddings_table

    rng = np.random.default_rng(seed)
    centres = _unit(rng.standard_normal((topics, dim)))
    bases = np.linalg.qr(rng.standard_normal((topics, dim, SUBSPACE)))[0].astype(np.float32)
    weights = rng.lognormal(0.0, 1.0, topics)
    background = n - pairs
    labels = rng.choice(topics, size=background, p=weights / weights.sum())
    originals = np.sort(rng.choice(background, size=pairs, replace=False))
    twins_of = np.full(n, -1, np.int64)
    twins_of[background:] = originals
    directory.mkdir(parents=True)
    shard_names, kept = [], []
    for start in range(0, n, CHUNK):
        stop = min(start + CHUNK, n)
        rows = np.arange(start, stop)
        block = np.empty((len(rows), dim), np.float32)
        plain = rows[rows < background]
        topic = labels[plain]
        z = rng.standard_normal((len(plain), SUBSPACE), dtype=np.float32)
        g = rng.standard_normal((len(plain), dim), dtype=np.float32)
        spread = np.empty((len(plain), dim), np.float32)
        for t in np.unique(topic):  # (d, s) @ (s, m) per topic: no (m, d, s) temporary
            members = np.flatnonzero(topic == t)
            spread[members] = (bases[t] @ z[members].T).T
        block[: len(plain)] = _unit(
            centres[topic] + SUB * spread / np.sqrt(SUBSPACE) + NOISE * g / np.sqrt(dim)
        )
        kept.append(block[: len(plain)][np.isin(plain, originals)])
        shard_names.append(f"part-{len(shard_names):05d}.parquet")
        if len(plain) < len(rows):  # the twins come last, in the order of their originals
            sources = np.concatenate(kept)
            first = start + len(plain) - background
            picked = sources[first : first + len(rows) - len(plain)]
            noise = rng.standard_normal(picked.shape, dtype=np.float32)
            block[len(plain) :] = _unit(picked + TWIN * noise / np.sqrt(dim))
        table = embeddings_table(
            [f"q{r:07d}" for r in rows],
            block,
            np.full(len(rows), 16, np.int32),
            np.zeros(len(rows), bool),
        )
        pq.write_table(table, directory / shard_names[-1], row_group_size=8192)
    manifest = {
        "kind": "embeddings",
        "model_id": "planted-topics",
        "weights_sha256": "0" * 64,
        "dim": dim,
        "pooling": "mean",
        "normalized": True,
        "dtype": "float32",
        "max_seq_length": 128,
        "counts": {"read": n, "embedded": n, "rejected": 0},
        "keep_text": False,
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    known = pa.table(
        {
            "id_a": [f"q{r:07d}" for r in originals],
            "id_b": [f"q{r:07d}" for r in range(background, n)],
        }
    )
    pq.write_table(known, directory / "known_pairs.parquet")
    return {"n": n, "dim": dim, "topics": topics, "pairs": pairs, "seed": seed}


def _run_job(argv: list[str], queue) -> None:
    from sbert_pipeline.jobs.stage_cli import run_command

    queue.put(run_command("pairs", argv).line())


def work_bytes(output: Path) -> int:
    """Bytes of the files under any ``_work`` folder below ``output`` (the run's attempt area)."""
    total = 0
    for root, _, files in os.walk(output):
        if "_work" not in Path(root).parts:
            continue
        for name in files:
            with contextlib.suppress(OSError):  # removed while listed
                total += os.path.getsize(os.path.join(root, name))
    return total


class DiskWatch:
    """The largest :func:`work_bytes` of ``output`` seen while the ``with`` block runs."""

    def __init__(self, output: Path, every: float = 0.2) -> None:
        self.output, self.every, self.peak = output, every, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._done.wait(self.every):
            self.peak = max(self.peak, work_bytes(self.output))

    def __enter__(self) -> DiskWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._done.set()
        self._thread.join()


def run_job(argv: list[str], watch: Path | None = None) -> tuple[str, float, int, int]:
    """``sbert pairs ARGV`` in a child process: (summary line, seconds, peak RSS bytes, peak
    bytes under ``watch``'s ``_work`` folders, 0 without ``watch``)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_run_job, args=(argv, queue))
    start = time.perf_counter()
    with DiskWatch(watch or Path("/nonexistent")) as disk:
        child.start()
        child.join()
    seconds = time.perf_counter() - start
    if child.exitcode != 0:
        raise SystemExit(f"the pairs job failed (exit status {child.exitcode})")
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return queue.get(), seconds, peak_kib * 1024, disk.peak


def _time_exact(directory: str, rows: int, queue) -> None:
    from sbert_pipeline.io.embeddings import EmbeddingsDataset
    from sbert_pipeline.vectors.allpairs import self_topk

    _, vectors = EmbeddingsDataset.open(directory).load()
    start = time.perf_counter()
    self_topk(vectors, 10, rows=(0, rows))
    queue.put((time.perf_counter() - start, len(vectors)))


def extrapolate_exact(directory: str, rows: int) -> dict:
    """Time exact ``self_topk`` for ``rows`` query rows against all vectors; scale to all rows."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_time_exact, args=(directory, rows, queue))
    child.start()
    child.join()
    seconds, n = queue.get()
    return {
        "query_rows": rows,
        "seconds": seconds,
        "extrapolated_all_rows_s": seconds * n / rows,
        "note": "an upper bound: a full run scores each tile once for two row blocks, so it can "
        "take up to half of this",
    }


def main() -> None:
    parser = benchmark_parser(__doc__, 1_000_000)
    parser.add_argument("--topics", type=int, default=None, help="default: n / 400")
    parser.add_argument("--pairs", type=int, default=None, help="planted pairs (default n/100)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--threshold", type=float, default=0.95)
    parser.add_argument("--clusters", type=int, default=None, help="default: the job's")
    parser.add_argument("--nprobe", type=int, default=None, help="default: the job's")
    parser.add_argument("--recall-sample", type=int, default=1000)
    parser.add_argument("--data-dir", default="/work/cache/pairs_bench")
    parser.add_argument("--extrapolate-exact", action="store_true")
    parser.add_argument("--exact-rows", type=int, default=2000)
    parser.add_argument(
        "--name", default=None, help="result name (default pairs_clustered at 1M, else by n)"
    )
    args = parser.parse_args()

    topics = args.topics or max(1, args.n // 400)
    pairs = args.pairs or args.n // 100
    data = Path(args.data_dir) / f"planted_n{args.n}_d{args.dim}_t{topics}_p{pairs}_s{args.seed}"
    if not (data / "_manifest.json").exists():
        shutil.rmtree(data, ignore_errors=True)
        start = time.perf_counter()
        write_planted(data, args.n, args.dim, topics, pairs, args.seed)
        print(f"generated {data} in {time.perf_counter() - start:.1f}s")
    output = Path(args.data_dir) / f"out_{data.name}"
    argv = ["--embeddings", str(data), "--output", str(output), "--overwrite"]
    argv += ["--method", "clustered", "--k", str(args.k), "--threshold", str(args.threshold)]
    argv += ["--recall-sample", str(args.recall_sample), "--seed", str(args.seed)]
    argv += ["--known-pairs", str(data / "known_pairs.parquet")]
    if args.clusters:
        argv += ["--clusters", str(args.clusters)]
    if args.nprobe:
        argv += ["--nprobe", str(args.nprobe)]
    line, seconds, peak, disk = run_job(argv, output)
    print(line)
    manifest = json.loads((output / "_manifest.json").read_text())
    known = manifest["known_pairs"]
    result = {
        "n": args.n,
        "dim": args.dim,
        "data": {
            "topics": topics,
            "planted_pairs": pairs,
            "seed": args.seed,
            "generator": {"sub": SUB, "noise": NOISE, "twin": TWIN, "subspace": SUBSPACE},
        },
        "job_argv": argv,
        "cpus": os.cpu_count(),
        "wall_s": seconds,
        "job_seconds": manifest["seconds"],
        "job_seconds_parts": manifest["seconds_parts"],
        "peak_rss_bytes": peak,
        "temporary_disk_peak_bytes": disk,
        "temporary_disk_over_vectors": disk / (args.n * args.dim * 4),
        "memory_budget": manifest.get("memory_budget"),
        "recall_at_k": manifest["recall_at_k"],
        "recall_queries": manifest["recall"]["queries"],
        "planted_pair_recall_in_pairs": known["recall_in_pairs"],
        "planted_pair_recall_in_neighbors": known["recall_in_neighbors"],
        "pairs_written": manifest["pairs"]["count"],
        "clustered": manifest["clustered"],
        "competitor": "none at this size: exact search is measured on a random sample of "
        "queries (recall_at_k); see exact_extrapolation for its full cost",
    }
    if args.extrapolate_exact:
        result["exact_extrapolation"] = extrapolate_exact(str(data), args.exact_rows)
        result["clustered_vs_exact_extrapolated"] = (
            result["exact_extrapolation"]["extrapolated_all_rows_s"] / seconds
        )
    default_name = "pairs_clustered" if args.n == 1_000_000 else f"pairs_clustered_n{args.n}"
    path = write_result(args.name or default_name, result)
    print(f"results: {path}")
    print(
        f"wall {seconds:.1f}s, peak RSS {peak / 2**30:.2f} GiB, temporary disk peak "
        f"{disk / 2**20:.0f} MiB ({result['temporary_disk_over_vectors']:.2f}x the vectors)"
    )
    if "exact_extrapolation" in result:
        exact = result["exact_extrapolation"]["extrapolated_all_rows_s"]
        print(f"exact self_topk extrapolated to all {args.n} rows: {exact:.0f}s")
    print(
        f"recall@{args.k} vs exact on {result['recall_queries']} queries: "
        f"{result['recall_at_k']:.4f}; planted-pair recall: "
        f"{result['planted_pair_recall_in_pairs']:.4f} (in pairs >= {args.threshold}), "
        f"{result['planted_pair_recall_in_neighbors']:.4f} (in neighbour lists)"
    )


if __name__ == "__main__":
    main()
