"""Exact all-pairs top-k: ours vs sentence-transformers' paraphrase mining vs FAISS flat search.

Contenders, on the same vectors (unit rows, 384-d), top-10 other rows per row, the same threads:

- ours: ``sbert_pipeline.vectors.allpairs.self_topk(vectors, 10)`` (precision ``auto``: a bf16
candidate
  pass over the upper triangle where the CPU has bf16 units, then an exact fp32 rescore). Its
  numba kernels are loaded (compiled on a fresh install) by a call on 2,000 random rows first;
  that time is reported as ``kernel_warmup_seconds`` and not counted.
- ``paraphrase_mining``: ``sentence_transformers.util.paraphrase_mining_embeddings`` with
  ``top_k=10`` and ``max_pairs = 10 N`` (so no pair is dropped), default chunk sizes
  (5,000 queries x 100,000 corpus rows); it returns the union of the rows' top-10 as pairs.
- ``faiss_flat``: ``faiss.IndexFlatIP`` add + ``search(vectors, 11)``, dropping each row itself.

Each contender runs in a fresh subprocess that loads the vectors from a ``.npy`` file (not
timed), so its peak RSS (``ru_maxrss``) is its own; the table shows the peak and the growth over
the RSS before the run. Every result is checked against ours: a neighbour (or pair) that one
lists and the other does not must score within ``TOLERANCE`` of the row's 10th best score (a tie
up to rounding), else it counts as a mismatch; ours is exact by construction (tests check it
against float64 brute force). A contender is skipped, with the reason printed, where its time
extrapolated from the previous size (quadratic in N) exceeds ``--max-seconds`` or its estimated
memory exceeds what the machine has available.

    python -m benchmarks.pairs --embeddings out/embeddings [--sizes 20000,100000,300000]
    python -m benchmarks.pairs                     # planted clustered vectors instead

The last line gives the speed (and memory) ratios of ours against each competitor.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, write_result
from benchmarks.parser import benchmark_parser

K = 10
TOLERANCE = 1e-5  # scores within this of a row's k-th best are ties up to rounding
CONTENDERS = ("ours", "paraphrase_mining", "faiss_flat")
LABELS = {
    "ours": "ours (exact, auto precision)",
    "paraphrase_mining": "paraphrase_mining_embeddings",
    "faiss_flat": "FAISS IndexFlatIP",
}

WARMUP_ROWS = 1000
SHORT = {"paraphrase_mining": "paraphrase_mining", "faiss_flat": "FAISS IndexFlatIP"}


def load_vectors(args: argparse.Namespace, n: int) -> np.ndarray:
    """The first ``n`` rows of ``--embeddings`` (normalised), or ``n`` planted unit vectors."""
    if args.embeddings:
        from sbert_pipeline.io.embeddings import EmbeddingsDataset

        _, vectors = EmbeddingsDataset.open(args.embeddings).load()
        if len(vectors) < n:
            raise ValueError(f"{args.embeddings} holds {len(vectors)} rows, fewer than {n}")
        vectors = vectors[:n]
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    from benchmarks.index import planted_vectors

    return planted_vectors(n, args.dim, args.clusters, args.spread, args.seed, 0)


def _rss_kib(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _ours(vectors: np.ndarray, threads: int) -> tuple[dict, dict]:
    import torch
    from sbert_pipeline.vectors.allpairs import SelfTopkStats, self_topk

    torch.set_num_threads(threads)
    # The scan kernels are compiled by numba on first use and cached on disk: a first call on
    # a few random rows loads (or, on a fresh install, compiles) them, as any second run of
    # the job would find them. Its time is reported, not counted.
    start = time.perf_counter()
    warm = np.random.default_rng(0).standard_normal((2 * WARMUP_ROWS, vectors.shape[1]))
    self_topk(warm.astype(np.float32), K)
    warmup = time.perf_counter() - start
    stats = SelfTopkStats()
    start, cpu_start = time.perf_counter(), time.process_time()
    indices, _ = self_topk(vectors, K, stats=stats)
    seconds = time.perf_counter() - start
    info = {
        "seconds": seconds,
        # All threads' CPU time: what the search costs whatever else runs on the machine.
        "cpu_seconds": time.process_time() - cpu_start,
        "kernel_warmup_seconds": warmup,
        "precision": stats.precision,
        "candidate_width": stats.candidate_width,
        "fallback_rows": stats.fallback_rows,
        "rescored_pairs": stats.rescored_pairs,
    }
    return info, {"indices": indices}


def _paraphrase_mining(vectors: np.ndarray, threads: int) -> tuple[dict, dict]:
    import torch
    from sentence_transformers.util import paraphrase_mining_embeddings

    torch.set_num_threads(threads)
    embeddings = torch.from_numpy(vectors)
    start = time.perf_counter()
    found = paraphrase_mining_embeddings(embeddings, top_k=K, max_pairs=K * len(vectors))
    seconds = time.perf_counter() - start
    pairs = np.asarray([(i, j) for _, i, j in found], dtype=np.int64).reshape(-1, 2)
    return {"seconds": seconds, "pairs": len(pairs)}, {"a": pairs[:, 0], "b": pairs[:, 1]}


def _faiss_flat(vectors: np.ndarray, threads: int) -> tuple[dict, dict]:
    import faiss

    faiss.omp_set_num_threads(threads)
    start = time.perf_counter()
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    _, found = index.search(vectors, K + 1)
    seconds = time.perf_counter() - start
    # Drop each row itself (the last column if an exact duplicate pushed it out).
    own = found == np.arange(len(vectors))[:, None]
    own[~own.any(axis=1), K] = True
    indices = found[~own].reshape(len(vectors), K)
    return {"seconds": seconds}, {"indices": indices}


RUNNERS = {"ours": _ours, "paraphrase_mining": _paraphrase_mining, "faiss_flat": _faiss_flat}


def child(args: argparse.Namespace) -> None:
    """Run one contender on ``--data``; save its result to ``--result``; print one JSON line."""
    import faiss  # noqa: F401  (all heavy imports before the clock and the baseline RSS)
    import sbert_pipeline.vectors.allpairs  # noqa: F401
    import sentence_transformers.util  # noqa: F401
    import torch  # noqa: F401

    vectors = np.load(args.data)
    before = _rss_kib("VmRSS")
    info, arrays = RUNNERS[args.child](vectors, args.threads)
    info["peak_rss_mb"] = _rss_kib("VmHWM") / 1024
    info["rss_before_mb"] = before / 1024
    np.savez(args.result, **arrays)
    print(json.dumps(info))


def exact_scores(vectors: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float64 inner products of the pairs, rounded to float32 (ours' definition of a score)."""
    out = np.empty(len(a), np.float32)
    for first in range(0, len(a), 65536):
        part = slice(first, first + 65536)
        left, right = vectors[a[part]].astype(np.float64), vectors[b[part]].astype(np.float64)
        out[part] = np.einsum("ij,ij->i", left, right)
    return out


def _classify(vectors, kth, a, b) -> tuple[int, int]:
    """Of pairs listed by one side only: (ties within TOLERANCE of a row's k-th, mismatches)."""
    if not len(a):
        return 0, 0
    scores = exact_scores(vectors, a, b)
    tie = (np.abs(scores - kth[a]) <= TOLERANCE) | (np.abs(scores - kth[b]) <= TOLERANCE)
    return int(tie.sum()), int((~tie).sum())


def compare_lists(vectors, ours: np.ndarray, kth: np.ndarray, theirs: np.ndarray) -> dict:
    """Per-row neighbour lists: neighbours listed by only one side, as ties or mismatches."""
    n = len(vectors)
    rows = np.repeat(np.arange(n, dtype=np.int64), K)
    our_keys = rows * n + ours.ravel()
    their_keys = rows * n + theirs.ravel().astype(np.int64)
    only = np.concatenate([np.setdiff1d(our_keys, their_keys), np.setdiff1d(their_keys, our_keys)])
    # A neighbour j of row r is a tie if its score is within TOLERANCE of row r's k-th.
    scores = exact_scores(vectors, only // n, only % n)
    tie = np.abs(scores - kth[only // n]) <= TOLERANCE
    return {"differing": len(only), "ties": int(tie.sum()), "mismatches": int((~tie).sum())}


def compare_pairs(vectors, ours: np.ndarray, kth: np.ndarray, a, b) -> dict:
    """Unions of the top-k lists as pairs ``a < b``: pairs listed by only one side."""
    n = len(vectors)
    rows = np.repeat(np.arange(n, dtype=np.int64), K)
    low, high = np.minimum(rows, ours.ravel()), np.maximum(rows, ours.ravel())
    our_keys = np.unique(low * n + high)
    their_keys = np.unique(np.minimum(a, b) * n + np.maximum(a, b))
    only = np.concatenate([np.setdiff1d(our_keys, their_keys), np.setdiff1d(their_keys, our_keys)])
    ties, mismatches = _classify(vectors, kth, only // n, only % n)
    return {
        "pairs_ours": len(our_keys),
        "pairs_theirs": len(their_keys),
        "differing": len(only),
        "ties": ties,
        "mismatches": mismatches,
    }


def available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def estimated_mb(name: str, n: int, dim: int) -> float:
    """Rough peak memory of a contender beyond the interpreter, from its algorithm."""
    data = n * dim * 4 / 2**20
    if name == "paraphrase_mining":
        # Normalised copies of the inputs, a 5,000 x 100,000 fp32 score chunk with its top-k
        # buffers, and ~250 bytes of Python heap, set and tuple per kept pair.
        chunk = 5000 * min(n, 100_000) * 4 / 2**20
        return 3 * data + 2 * chunk + n * K * 250 / 2**20
    if name == "faiss_flat":
        return 2 * data + n * (K + 1) * 12 / 2**20
    return 2 * data + n * 42 * 12 / 2**20 + 4096 * 4096 * 2 / 2**20


def run_child(name: str, data: Path, result: Path, threads: int, timeout: float) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "benchmarks.pairs", "--child", name, "--data", str(data)]
    command += ["--result", str(result), "--threads", str(threads)]
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"ran past the time limit of {timeout:.0f} s"}
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"skipped": f"failed with exit status {done.returncode}: {tail[0]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--sizes", default="20000,100000,300000", help="comma-separated N")
    parser.add_argument("--embeddings", default=None, help="an embed output (else planted)")
    parser.add_argument("--dim", type=int, default=384, help="planted vectors only")
    parser.add_argument("--clusters", type=int, default=1000, help="planted vectors only")
    parser.add_argument("--spread", type=float, default=1.0, help="planted vectors only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--max-seconds", type=float, default=900.0, help="per contender and N")
    parser.add_argument("--only", default=",".join(CONTENDERS), help="contenders to run")
    parser.add_argument("--name", default="pairs", help="results file name")
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    sizes = sorted(int(size) for size in args.sizes.split(","))
    contenders = [name for name in CONTENDERS if name in args.only.split(",")]
    if "ours" not in contenders:
        raise ValueError("--only must include ours: the others are checked against it")
    runs: dict[int, dict] = {}
    dim = args.dim
    previous: dict[str, tuple[int, float]] = {}  # contender -> (N, seconds) of its last run
    with tempfile.TemporaryDirectory(prefix="pairs-bench-") as scratch:
        for n in sizes:
            vectors = np.ascontiguousarray(load_vectors(args, n), dtype=np.float32)
            dim = vectors.shape[1]
            data = Path(scratch) / "vectors.npy"
            np.save(data, vectors)
            print(f"N = {n} x {dim}, top-{K}, {args.threads} threads", flush=True)
            entries: dict[str, dict] = {}
            for name in contenders:
                entries[name] = _run_or_skip(name, n, dim, data, scratch, args, previous)
                if "seconds" in entries[name]:
                    previous[name] = (n, entries[name]["seconds"])
            _check_against_ours(vectors, entries, scratch)
            runs[n] = entries
            for name, entry in entries.items():
                print("  " + _row(name, entry), flush=True)

    ratios = _ratios(runs)
    path = write_result(
        args.name,
        {
            "data": args.embeddings
            or {"planted": True, "clusters": args.clusters, "spread": args.spread},
            "dim": dim,
            "k": K,
            "threads": args.threads,
            "tolerance": TOLERANCE,
            "max_seconds": args.max_seconds,
            "runs": {str(n): entries for n, entries in runs.items()},
            "ratios": ratios,
        },
    )
    print(f"results: {path}")
    print(_summary(ratios))


def _run_or_skip(name, n, dim, data, scratch, args, previous) -> dict:
    if name in previous:
        last_n, last_seconds = previous[name]
        estimate = last_seconds * (n / last_n) ** 2
        if estimate > args.max_seconds:
            return {
                "skipped": f"estimated {estimate:.0f} s from {last_seconds:.0f} s at N={last_n} "
                f"(quadratic), over --max-seconds {args.max_seconds:.0f}"
            }
    need, have = estimated_mb(name, n, dim), available_mb()
    if need > 0.8 * have:
        return {"skipped": f"needs ~{need:.0f} MB, {have:.0f} MB available"}
    result = Path(scratch) / f"{name}.npz"
    entry = run_child(name, data, result, args.threads, timeout=1.5 * args.max_seconds)
    if "seconds" in entry:
        entry["result_file"] = str(result)
    return entry


def _check_against_ours(vectors: np.ndarray, entries: dict, scratch: str) -> None:
    ours = entries["ours"]
    if "seconds" not in ours:
        return
    indices = np.load(ours.pop("result_file"))["indices"]
    kth = exact_scores(vectors, np.arange(len(vectors)), indices[:, -1])
    for name, entry in entries.items():
        if name == "ours" or "seconds" not in entry:
            continue
        found = np.load(entry.pop("result_file"))
        if name == "paraphrase_mining":
            entry["check"] = compare_pairs(vectors, indices, kth, found["a"], found["b"])
        else:
            entry["check"] = compare_lists(vectors, indices, kth, found["indices"])


def _row(name: str, entry: dict) -> str:
    if "skipped" in entry:
        return f"{LABELS[name]:<30} skipped: {entry['skipped']}"
    text = (
        f"{LABELS[name]:<30} {entry['seconds']:8.1f} s  peak RSS {entry['peak_rss_mb']:7.0f} MB "
        f"(+{entry['peak_rss_mb'] - entry['rss_before_mb']:6.0f} MB)"
    )
    if name == "ours":
        text += (
            f"  {entry['precision']}, {entry['fallback_rows']} fallback rows, "
            f"{entry['rescored_pairs']} pairs rescored"
        )
    elif "check" in entry:
        check = entry["check"]
        text += f"  vs ours: {check['mismatches']} mismatches, {check['ties']} ties"
    return text


def _ratios(runs: dict[int, dict]) -> dict:
    ratios: dict[str, dict] = {}
    for n, entries in runs.items():
        ours = entries.get("ours", {})
        for name, entry in entries.items():
            if name == "ours" or "seconds" not in entry or "seconds" not in ours:
                continue
            ratios.setdefault(name, {})[str(n)] = {
                "speed": entry["seconds"] / ours["seconds"],
                "peak_memory": entry["peak_rss_mb"] / ours["peak_rss_mb"],
                "memory_growth": (entry["peak_rss_mb"] - entry["rss_before_mb"])
                / max(ours["peak_rss_mb"] - ours["rss_before_mb"], 1.0),
                "mismatches": entry["check"]["mismatches"],
            }
    return ratios


def _summary(ratios: dict) -> str:
    parts = []
    for name in ("paraphrase_mining", "faiss_flat"):
        for n, ratio in ratios.get(name, {}).items():
            parts.append(
                f"ours vs {SHORT[name]} at {int(n) // 1000}k: {ratio['speed']:.1f}x faster, "
                f"{1 / ratio['peak_memory']:.2f}x its peak memory"
            )
    return "; ".join(parts) if parts else "no ratios: a contender was skipped at every size"


if __name__ == "__main__":
    main()
