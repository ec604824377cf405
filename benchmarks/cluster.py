"""k-means at scale: ours vs scikit-learn ``MiniBatchKMeans`` vs plain ``faiss.Kmeans``.

All three cluster the same planted mixture: ``n`` unit vectors (``dim``-d, float32) around ``k``
random unit centres with uneven cluster sizes, member = ``normalize(centre + noise * g /
sqrt(dim))``. Each contender runs in its own subprocess, which regenerates the data from the
seed (not timed), so its peak memory (``ru_maxrss``) is its own:

* ours: ``fit_spherical_kmeans`` on a sample (64 rows per cluster, as ``sbert cluster``), then
  ``assign`` of all rows (bf16 candidates, fp32-exact labels);
* ``MiniBatchKMeans(n_clusters=k, random_state=seed)`` (k-means++ start), ``labels_`` of ``fit``;
* ``faiss.Kmeans(dim, k, niter=20, seed=seed, spherical=True)`` (random start, 256 points per
  centroid), then its index's nearest centroid for every row.

Reported per contender: wall time (fit + labels of every row), peak RSS (the data itself is
``n * dim * 4`` bytes of it), objective (sum over rows of ``1 - cos`` to the nearest of the
contender's centroids, normalised, computed exactly in fp32 by faiss, the same way for all) and
the adjusted Rand index of its labels against the planted ones.

    python -m benchmarks.cluster [--n 1000000] [--k 1000] [--dim 384] [--noise 0.5] [--seed 0]
        [--threads N]

Every contender gets the same threads (default: all cores) through ``OMP_NUM_THREADS`` (faiss,
scikit-learn's OpenMP loops and torch read it) and the BLAS thread variables.

The default noise (0.5: cosine to the centre about 0.89) is where ``MiniBatchKMeans`` works well
(ARI 0.97 on 100k x 384, k = 1,000, measured here); at noise 1.0 (cosine 0.71) it collapsed to an
ARI of 0.06 on 100k and on 200k rows, where ours reached 0.99 (200k).

The last line is ``ours/MiniBatchKMeans speed ratio: X``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
from sbert_pipeline.cluster.options import MIN_SAMPLE, SAMPLE_PER_CLUSTER

from benchmarks.common import ROOT, write_result
from benchmarks.parser import benchmark_parser

CHUNK = 8192  # rows generated at a time: small, so the data dominates the RSS before the fit


def planted_mixture(n: int, k: int, dim: int, noise: float, seed: int):
    """``(vectors (n, dim) float32 unit rows, labels (n,))``, built in chunks to bound memory."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((k, dim), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    weights = rng.lognormal(0.0, 0.5, k)
    labels = rng.choice(k, size=n, p=weights / weights.sum())
    vectors = np.empty((n, dim), np.float32)
    scale = np.float32(noise / np.sqrt(dim))
    for start in range(0, n, CHUNK):
        part = centres[labels[start : start + CHUNK]]
        part += scale * rng.standard_normal(part.shape, dtype=np.float32)
        part /= np.linalg.norm(part, axis=1, keepdims=True)
        vectors[start : start + CHUNK] = part
    return vectors, labels


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _ours(vectors: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sbert_pipeline.vectors.kmeans import assign, fit_spherical_kmeans

    size = min(len(vectors), max(SAMPLE_PER_CLUSTER * k, MIN_SAMPLE))
    rows = np.random.default_rng(seed).choice(len(vectors), size=size, replace=False)
    fit = fit_spherical_kmeans(vectors[np.sort(rows)], k, seed=seed)
    return assign(vectors, fit.centroids).labels, fit.centroids


def _minibatch_kmeans(vectors: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.cluster import MiniBatchKMeans

    model = MiniBatchKMeans(n_clusters=k, random_state=seed).fit(vectors)
    return model.labels_, model.cluster_centers_.astype(np.float32)


def _faiss_kmeans(vectors: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    import faiss

    model = faiss.Kmeans(vectors.shape[1], k, niter=20, seed=seed, spherical=True)
    model.train(vectors)
    _, nearest = model.index.search(vectors, 1)
    return nearest[:, 0], model.centroids


# Each fits and labels every row, returning (labels, centroids); the module each imports is
# imported before the clock starts.
CONTENDERS = {
    "minibatch_kmeans": (_minibatch_kmeans, "sklearn.cluster"),
    "faiss_kmeans": (_faiss_kmeans, "faiss"),
    "ours": (_ours, "sbert_pipeline.vectors.kmeans"),
}


def _objective(vectors: np.ndarray, centroids: np.ndarray) -> float:
    import faiss

    unit = centroids / np.linalg.norm(centroids, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(unit, dtype=np.float32))
    scores, _ = index.search(vectors, 1)
    return float(np.sum(1.0 - scores.astype(np.float64)))


def child(args) -> None:
    """One contender in this process; prints one JSON line."""
    from sklearn.metrics import adjusted_rand_score

    contender, module = CONTENDERS[args.child]
    importlib.import_module(module)
    vectors, truth = planted_mixture(args.n, args.k, args.dim, args.noise, args.seed)
    data_rss = _peak_rss_mb()
    start = time.perf_counter()
    labels, centroids = contender(vectors, args.k, args.seed)
    seconds = time.perf_counter() - start
    peak = _peak_rss_mb()
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_rss_mb": peak,
                "rss_before_fit_mb": data_rss,
                "objective": _objective(vectors, centroids),
                "ari": float(adjusted_rand_score(truth, labels)),
            }
        )
    )


def main() -> None:
    parser = benchmark_parser(__doc__, 1_000_000)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--noise", type=float, default=0.5)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    common = ["--n", str(args.n), "--k", str(args.k), "--dim", str(args.dim)]
    common += ["--noise", str(args.noise), "--seed", str(args.seed), "--threads", str(args.threads)]
    threads = str(args.threads)
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    env["OPENBLAS_NUM_THREADS"] = threads
    results = {}
    for name in CONTENDERS:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.cluster", *common, "--child", name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        entry = results[name]
        print(
            f"{name:<18} {entry['seconds']:8.2f} s  peak RSS {entry['peak_rss_mb']:7.0f} MB "
            f"(+{entry['peak_rss_mb'] - entry['rss_before_fit_mb']:5.0f} MB for the fit)  "
            f"objective {entry['objective']:12.1f}  ARI {entry['ari']:.4f}",
            flush=True,
        )

    ours, mbk, plain = results["ours"], results["minibatch_kmeans"], results["faiss_kmeans"]
    ratios = {
        "speed_vs_minibatch_kmeans": mbk["seconds"] / ours["seconds"],
        "speed_vs_faiss_kmeans": plain["seconds"] / ours["seconds"],
        "objective_vs_faiss_kmeans": ours["objective"] / plain["objective"],
        "objective_vs_minibatch_kmeans": ours["objective"] / mbk["objective"],
    }
    path = write_result(
        f"cluster_n{args.n}_k{args.k}",
        {
            "n": args.n,
            "k": args.k,
            "dim": args.dim,
            "noise": args.noise,
            "seed": args.seed,
            "threads": args.threads,
            "data_mb": args.n * args.dim * 4 / 2**20,
            "results": results,
            "ratios": ratios,
        },
    )
    print(f"data: {args.n} x {args.dim} float32 = {args.n * args.dim * 4 / 2**20:.0f} MB")
    print(f"results: {path}")
    print(
        f"ours/faiss.Kmeans: speed ratio {ratios['speed_vs_faiss_kmeans']:.2f}, objective ratio "
        f"{ratios['objective_vs_faiss_kmeans']:.4f}, ARI {ours['ari']:.4f} vs {plain['ari']:.4f}"
    )
    print(f"ours/MiniBatchKMeans ARI: {ours['ari']:.4f} vs {mbk['ari']:.4f}")
    print(f"ours/MiniBatchKMeans speed ratio: {ratios['speed_vs_minibatch_kmeans']:.2f}")


if __name__ == "__main__":
    main()
