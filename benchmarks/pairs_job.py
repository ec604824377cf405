"""``sbert pairs --method exact`` against the all-pairs kernel it runs, on real embeddings.

Contenders, on the same unit vectors (the first ``--n`` rows of ``--vectors``, cached MiniLM
question embeddings), top-10 other rows per row, the same threads:

- command: ``python -m sbert_pipeline.jobs.cli pairs --embeddings DIR --output OUT --method exact
--k 10``
  in a subprocess, timed from start to exit (Python and library imports, the launcher's scan
  of the embeddings, the Beam pipeline, the Parquet shards and the manifest); its peak RSS is
  the process's own (``wait4``). The embeddings folder (Parquet shards and manifest, written
  by ``tests/planted_vectors.write_embeddings_dir``) is not timed.
- kernel: ``sbert_pipeline.vectors.allpairs.self_topk(vectors, 10)`` in-process, in the child of
  ``benchmarks/pairs.py`` (vectors loaded from ``.npy`` first, numba kernels loaded by a
  warm-up call, neither timed).

The kernel runs first, so the numba cache the command loads from is warm; with ``--repeats R``
kernel and command alternate R times (kernel, command, kernel, ...) and the ratios use each
one's fastest run, so a burst of load from elsewhere does not fall on one side only; each
command's ratios to the kernel run just before it (which shared its load) follow.

Beyond the cached rows (158,678 QQP dev questions), ``--n`` rows are made by stacking them
again, each copy's rows moved by random noise of norm ``--perturbation`` and re-normalised
(synthetic near-copies of real questions: every row gets a few near-duplicates; the JSON says
how many rows are real).

    python -m benchmarks.pairs_job [--n 100000] [--threads 2] [--repeats 2] [--name pairs_job]

The line before last gives the command's time over the kernel's: the job's own clock (its manifest's
``seconds``: from the embeddings check to the manifest, in-process like the kernel's), the
subprocess's wall time (Python start and imports too) and its CPU seconds (user + system, all
threads: the work done, which on a machine shared with other jobs varies far less than wall
time), and the command's peak RSS against its worker budget (``--worker-memory``, default
4GB); the last line, each command's wall and CPU ratios to the kernel run just before it. JSON
in ``benchmarks/results/NAME.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from sbert_pipeline.io.sizes import parse_size

from benchmarks.common import ROOT, write_result
from benchmarks.pairs import K, run_child
from benchmarks.parser import benchmark_parser

VECTORS = Path("/work/cache/qqp/dev_emb_float32.npy")
WORKER_MEMORY = "4GB"  # sbert pairs' default --worker-memory


def bench_vectors(path: Path, n: int, perturbation: float, seed: int = 0) -> np.ndarray:
    """``n`` unit rows: the first ``n`` of ``path``, or all of them stacked again as often as
    needed, each copy's rows plus Gaussian noise of norm ``perturbation``, re-normalised."""
    real = np.load(path, mmap_mode="r")
    parts, rng = [], np.random.default_rng(seed)
    for first in range(0, n, len(real)):
        part = real[: min(len(real), n - first)].astype(np.float32)
        if first:
            noise = rng.standard_normal(part.shape, dtype=np.float32)
            part += noise * (perturbation / np.sqrt(part.shape[1], dtype=np.float32))
        parts.append(part / np.linalg.norm(part, axis=1, keepdims=True))
    return np.concatenate(parts)


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
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
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
    parser.add_argument("--repeats", type=int, default=1, help="kernel/command alternations")
    parser.add_argument("--perturbation", type=float, default=0.3, help="noise norm of copies")
    parser.add_argument("--name", default="pairs_job", help="results file name")
    args = parser.parse_args()

    vectors = bench_vectors(args.vectors, args.n, args.perturbation)
    n, dim = vectors.shape
    real_rows = min(n, len(np.load(args.vectors, mmap_mode="r")))
    load_before = os.getloadavg()
    kernels, jobs = [], []
    with tempfile.TemporaryDirectory(prefix="pairs_job_") as scratch:
        root = Path(scratch)
        np.save(root / "vectors.npy", vectors)
        write_folder(root / "embeddings", vectors)
        del vectors
        print(f"N = {n} x {dim} ({real_rows} real), top-{K}, {args.threads} threads", flush=True)
        output = root / "pairs"
        command = [sys.executable, "-m", "sbert_pipeline.jobs.cli", "pairs", "--embeddings"]
        command += [str(root / "embeddings"), "--output", str(output)]
        command += ["--method", "exact", "--k", str(K)]
        for _ in range(args.repeats):
            kernel = run_child(
                "ours", root / "vectors.npy", root / "kernel.npz", args.threads, args.max_seconds
            )
            kernel["load_average"] = os.getloadavg()
            kernels.append(kernel)
            print(f"  kernel self_topk: {kernel.get('seconds', 0):.2f} s", flush=True)
            job = run_command(command, args.threads, args.max_seconds, root / "command.log")
            if job.get("returncode") == 0:
                manifest = json.loads((output / "_manifest.json").read_text())
                job["job_seconds"] = manifest["seconds"]
                job["seconds_parts"] = manifest["seconds_parts"]
                job["exact"] = manifest["exact"]
            job["load_average"] = os.getloadavg()
            jobs.append(job)
            load, line = job["load_average"][0], job.get("last_line")
            print(f"  command: {job.get('seconds', 0):.2f} s, load {load:.1f} ({line})", flush=True)
            shutil.rmtree(output, ignore_errors=True)  # each run writes a new output
    load_after = os.getloadavg()
    timed_kernels = [run for run in kernels if "seconds" in run]
    timed_jobs = [run for run in jobs if "job_seconds" in run]
    timed = bool(timed_kernels and timed_jobs)
    kernel = min(timed_kernels, key=lambda run: run["seconds"]) if timed else kernels[0]
    job = min(timed_jobs, key=lambda run: run["seconds"]) if timed else jobs[0]
    ratio = job["seconds"] / kernel["seconds"] if timed else None
    # The job's own clock: from its embeddings check to its manifest, in-process (no interpreter
    # start or imports), as the kernel's is.
    job_ratio = job["job_seconds"] / kernel["seconds"] if timed else None
    # CPU seconds (user + system, every thread) depend little on what else runs on the machine.
    cpu_ratio = job["cpu_seconds"] / kernel["cpu_seconds"] if timed else None
    # Each command against the kernel run just before it (the load they shared): where the load
    # swings between alternations, the fastest runs of each side can come from different loads.
    pairs = [
        (command["seconds"] / kernel["seconds"], command["cpu_seconds"] / kernel["cpu_seconds"])
        for kernel, command in zip(kernels, jobs, strict=True)
        if "seconds" in kernel and "job_seconds" in command
    ]
    budget = parse_size(WORKER_MEMORY)
    peak = max(run.get("peak_rss_mb", 0) for run in jobs) * 1024**2
    result = {
        "n": n,
        "real_rows": real_rows,
        "synthetic_rows": n - real_rows,
        "perturbation_norm": args.perturbation if n > real_rows else None,
        "dim": dim,
        "k": K,
        "threads": args.threads,
        "vectors": str(args.vectors),
        "command": " ".join(command[2:]),
        "worker_memory": WORKER_MEMORY,
        "worker_memory_bytes": budget,
        "command_peak_rss_bytes": int(peak),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "kernel": kernel,
        "command_run": job,
        "kernel_runs": kernels,
        "command_runs": jobs,
        "ratio_command_over_kernel": ratio,
        "ratio_job_over_kernel": job_ratio,
        "ratio_cpu_command_over_kernel": cpu_ratio,
        "ratios_per_alternation": [{"wall": wall, "cpu": cpu} for wall, cpu in pairs],
    }
    print(f"  results -> {write_result(args.name, result)}")
    shown = (
        "n/a"
        if ratio is None
        else f"{job_ratio:.2f}x in-process, {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU seconds"
    )
    memory = f"peak RSS {peak / 1024**3:.2f} GiB of --worker-memory {WORKER_MEMORY}"
    each = ", ".join(f"{wall:.2f}x wall / {cpu:.2f}x CPU" for wall, cpu in pairs) or "n/a"
    print(f"N = {n}: sbert pairs --method exact / self_topk in-process = {shown}; {memory}")
    print(f"  each command over the kernel run just before it: {each}")


if __name__ == "__main__":
    main()
