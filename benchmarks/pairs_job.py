"""``sbert pairs --method exact`` against the all-pairs kernel it runs, on real embeddings.

Contenders, on the same unit vectors (the first ``--n`` rows of ``--vectors``, cached MiniLM
question embeddings), top-10 other rows per row, the same threads:

- command: ``python -m jobs.cli pairs --embeddings DIR --output OUT --method exact --k 10``
  in a subprocess, timed from start to exit (Python and library imports, the launcher's scan
  of the embeddings, the Beam pipeline, the Parquet shards and the manifest); its peak RSS is
  the process's own (``wait4``). The embeddings folder (Parquet shards and manifest, written
  by ``tests/planted_vectors.write_embeddings_dir``) is not timed.
- kernel: ``pipelines.vectors.allpairs.self_topk(vectors, 10)`` in-process, in the child of
  ``benchmarks/pairs.py`` (vectors loaded from ``.npy`` first, numba kernels loaded by a
  warm-up call, neither timed).

The kernel runs first, so the numba cache the command loads from is warm.

    python -m benchmarks.pairs_job [--n 100000] [--threads 2]

The last line gives the command's time over the kernel's: the job's own clock (its manifest's
``seconds``: from the embeddings check to the manifest, in-process like the kernel's) and the
subprocess's wall time (Python start and imports too); JSON in
``benchmarks/results/pairs_job.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, write_result
from benchmarks.pairs import K, run_child
from benchmarks.parser import benchmark_parser

VECTORS = Path("/work/cache/qqp/dev_emb_float32.npy")


def write_folder(directory: Path, vectors: np.ndarray) -> None:
    """An embeddings folder holding ``vectors`` (unit rows), ids ``q0000000`` ... in row order."""
    sys.path.insert(0, str(ROOT / "tests"))
    from planted_vectors import write_embeddings_dir

    ids = [f"q{i:07d}" for i in range(len(vectors))]
    write_embeddings_dir(
        directory, vectors, n_shards=4, row_group_size=10_000, ids=ids, model_id="minilm-cached"
    )


def run_command(command: list[str], threads: int, timeout: float, log: Path) -> dict:
    """Run ``command``; its wall seconds, exit status and its own peak RSS (``wait4``)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with log.open("w") as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out)
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        timer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)
    lines = log.read_text().strip().splitlines()
    return {
        "seconds": seconds,
        "returncode": process.returncode,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "last_line": lines[-1] if lines else "",
    }


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--vectors", type=Path, default=VECTORS, help="(N, d) float32 .npy")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-seconds", type=float, default=900.0)
    args = parser.parse_args()

    vectors = np.load(args.vectors, mmap_mode="r")[: args.n].astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    n, dim = vectors.shape
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="pairs_job_") as scratch:
        root = Path(scratch)
        np.save(root / "vectors.npy", vectors)
        write_folder(root / "embeddings", vectors)
        del vectors
        print(f"N = {n} x {dim}, top-{K}, {args.threads} threads", flush=True)
        kernel = run_child(
            "ours", root / "vectors.npy", root / "kernel.npz", args.threads, args.max_seconds
        )
        print(f"  kernel self_topk: {kernel.get('seconds', 0):.2f} s", flush=True)
        command = [sys.executable, "-m", "jobs.cli", "pairs", "--embeddings"]
        command += [str(root / "embeddings"), "--output", str(root / "pairs")]
        command += ["--method", "exact", "--k", str(K)]
        job = run_command(command, args.threads, args.max_seconds, root / "command.log")
        if job.get("returncode") == 0:
            manifest = json.loads((root / "pairs" / "_manifest.json").read_text())
            job["job_seconds"] = manifest["seconds"]
            job["seconds_parts"] = manifest["seconds_parts"]
            job["exact"] = manifest["exact"]
        print(f"  command: {job.get('seconds', 0):.2f} s ({job.get('last_line')})", flush=True)
    load_after = os.getloadavg()
    timed = "seconds" in kernel and "job_seconds" in job
    ratio = job["seconds"] / kernel["seconds"] if timed else None
    # The job's own clock: from its embeddings check to its manifest, in-process (no interpreter
    # start or imports), as the kernel's is.
    job_ratio = job["job_seconds"] / kernel["seconds"] if timed else None
    result = {
        "n": n,
        "dim": dim,
        "k": K,
        "threads": args.threads,
        "vectors": str(args.vectors),
        "command": " ".join(command[2:]),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "kernel": kernel,
        "command_run": job,
        "ratio_command_over_kernel": ratio,
        "ratio_job_over_kernel": job_ratio,
    }
    print(f"  results -> {write_result('pairs_job', result)}")
    shown = "n/a" if ratio is None else f"{job_ratio:.2f}x in-process, {ratio:.2f}x wall"
    print(f"N = {n}: sbert pairs --method exact / self_topk in-process = {shown}")


if __name__ == "__main__":
    main()
