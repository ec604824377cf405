"""Engines: the embed stage on the local runner, a Dask cluster and a Spark cluster, on the same
texts, model and cores, in one run; start-up apart from throughput.

Reads the first ``--texts`` texts of ``../shared/data/corpus`` (default 3,000) and writes them,
and their first ``--small`` (default 300), as JSONL corpora. Variants, in turn:

* ``local-1`` / ``local-2``: the local runner with 1 / 2 torch threads;
* ``dask-1`` / ``dask-2``: a ``distributed.LocalCluster`` of 1 / 2 worker processes with one
  thread each, started here;
* ``spark-2``: a Spark standalone cluster of 2 workers (1 core each) with Beam's job server and
  Python SDK worker pool, started here by ``deploy/spark/local-cluster.sh up --job-server`` on
  free ports with its own state folder (``--no-spark`` leaves it out).

Each variant runs in one fresh launcher process: a warm-up run on the small corpus, then
``--repeats`` runs (default 2) of the small and of the full corpus, alternating. Every run pays
what any job pays before its first text: on the local runner little, on Dask the model load in
a worker that has none, on Spark a new Spark application (executor JVMs, the copy of the jars,
SDK workers, the model load). So the throughput is taken from the difference,
``(texts - small) / (median full run - median small run)``, and what is left of a small run is
the fixed start-up cost per stage (``startup_per_stage_s``). The cluster's own start (and for
Spark the job server's JVM) is timed apart (``cluster``).

    python -m benchmarks.engines [--texts 3000] [--small 300] [--repeats 2] [--no-spark]

The last lines are the ratios: a worker's throughput over the local runner's per core on the
same number of cores (goal 0.8), and Dask's 2 workers over 1. ``--texts 3000`` writes
``benchmarks/results/engines.json``; another size adds ``_n<texts>`` to the name.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from benchmarks.common import DATA_DIR, ROOT, read_tsv, write_result
from benchmarks.parser import benchmark_parser

DEFAULT_TEXTS = 3000
GOAL_PER_WORKER = 0.8
LOCAL_CLUSTER = ROOT / "deploy" / "spark" / "local-cluster.sh"


@dataclass(frozen=True)
class Variant:
    """One way to run the stage: on ``engine`` (local, dask, spark) with ``cores`` cores, one
    worker per core on a cluster."""

    name: str
    engine: str
    cores: int


VARIANTS = (
    Variant("local-1", "local", 1),
    Variant("dask-1", "dask", 1),
    Variant("local-2", "local", 2),
    Variant("dask-2", "dask", 2),
    Variant("spark-2", "spark", 2),
)


def measure(
    corpora: dict[str, str],
    work: str,
    model: str,
    threads: int,
    beam_options: list[str],
    repeats: int,
):
    """Seconds of each embed run in this process: a warm-up on the small corpus, then
    ``repeats`` small and full runs, alternating."""
    from sbert_pipeline import embed

    order = ["warmup"] + ["small", "full"] * repeats
    runs = []
    for i, size in enumerate(order):
        options = embed.Options(
            input=corpora["small" if size == "warmup" else size],
            output=str(Path(work) / f"out-{i}"),
            id_field="id",
            model=model,
            threads=threads,
            beam_options=tuple(beam_options),
        )
        start = time.perf_counter()
        summary = embed.run(options).summary
        runs.append(
            {
                "corpus": size,
                "seconds": time.perf_counter() - start,
                "embedded": summary.embedded,
                "rejected": summary.rejected,
            }
        )
    return runs


def model_load_seconds(model: str) -> float:
    """Seconds to load the model with one torch thread (run in a fresh process)."""
    from sbert_core import SentenceEncoder

    start = time.perf_counter()
    SentenceEncoder.load(model, num_threads=1)
    return time.perf_counter() - start


def in_fresh_process(function, *args):
    """``function(*args)`` in a new spawned Python process (no model, no torch state shared)."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


@contextmanager
def dask_cluster(workers: int) -> Iterator[tuple[list[str], dict]]:
    """Beam options of a local Dask cluster of ``workers`` processes, and its timings (filled
    in as it starts and closes)."""
    from distributed import Client, LocalCluster
    from sbert_pipeline.stage_api.dask_cluster import worker_environ

    start = time.perf_counter()
    with worker_environ():  # the worker environment of `local[N]`
        cluster = LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
    client = Client(cluster)
    client.wait_for_workers(workers)
    timing = {"start_s": time.perf_counter() - start}
    pids_before = sorted(client.run(os.getpid).values())
    try:
        yield ["--runner=dask", f"--dask_client_address={cluster.scheduler_address}"], timing
        # The same worker processes before and after: no worker died and was replaced.
        timing["same_worker_processes"] = sorted(client.run(os.getpid).values()) == pids_before
    finally:
        start = time.perf_counter()
        client.close()
        cluster.close()
        timing["close_s"] = time.perf_counter() - start


def free_port(span: int = 1) -> int:
    """A port P with P, P-1, ..., P-span+1 free on 127.0.0.1 (the job server takes three)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port - span >= 1024 and all(_free(port - i) for i in range(span)):
            return port
    raise RuntimeError("no free ports on 127.0.0.1")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _seconds(pattern: str, text: str) -> float | None:
    found = re.search(pattern, text)
    return float(found.group(1)) if found else None


@contextmanager
def spark_cluster(workers: int, home: Path) -> Iterator[tuple[list[str], dict]]:
    """Beam options of a local Spark cluster of ``workers`` workers with a job server, started
    by ``local-cluster.sh`` in its own state folder ``home`` on free ports, and its timings as
    the script reports them."""
    # The SDK workers run the python3 first on PATH: this one, whose environment has the package.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = dict(os.environ, SBERT_SPARK_HOME=str(home), PATH=path)
    ports = [
        f"--master-port={free_port()}",
        f"--webui-port={free_port()}",
        f"--worker-pool-port={free_port()}",
        f"--job-port={free_port(3)}",
    ]
    start = time.perf_counter()
    up = subprocess.run(
        ["bash", str(LOCAL_CLUSTER), "up", "--workers", str(workers), "--job-server", *ports],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if up.returncode:
        raise RuntimeError(f"local-cluster.sh up failed:\n{up.stderr[-3000:]}")
    timing = {
        "start_s": time.perf_counter() - start,
        "master_s": _seconds(r"master up in ([\d.]+)s", up.stderr),
        "workers_registered_s": _seconds(r"registered ([\d.]+)s", up.stderr),
        "worker_pool_s": _seconds(r"worker pool up in ([\d.]+)s", up.stderr),
        "job_server_jvm_s": _seconds(r"job server up in ([\d.]+)s", up.stderr),
    }
    from sbert_pipeline.stage_api.portable_settings import cluster_env

    previous = os.environ.get("SBERT_SPARK_HOME")
    os.environ["SBERT_SPARK_HOME"] = str(home)  # the launcher process reads the record
    try:
        yield (
            [
                "--runner=spark",
                f"--spark_master_url={up.stdout.strip().splitlines()[-1]}",
                f"--job_endpoint={cluster_env()['BEAM_JOB_ENDPOINT']}",
            ],
            timing,
        )
    finally:
        if previous is None:
            os.environ.pop("SBERT_SPARK_HOME", None)
        else:
            os.environ["SBERT_SPARK_HOME"] = previous
        start = time.perf_counter()
        subprocess.run(
            ["bash", str(LOCAL_CLUSTER), "down"], env=env, capture_output=True, check=True
        )
        timing["close_s"] = time.perf_counter() - start


def run_variant(variant: Variant, corpora: dict[str, str], args) -> tuple[list[dict], dict | None]:
    """(runs, cluster timings) of one variant; a cluster is started and closed here."""
    work = tempfile.mkdtemp(prefix=f"engines-{variant.name}-", dir=Path(corpora["full"]).parent)
    if variant.engine == "local":
        runs = in_fresh_process(measure, corpora, work, args.model, variant.cores, [], args.repeats)
        return runs, None
    if variant.engine == "dask":
        cluster = dask_cluster(variant.cores)
    else:
        cluster = spark_cluster(variant.cores, Path(work) / "spark-home")
    with cluster as (beam_options, timing):
        runs = in_fresh_process(measure, corpora, work, args.model, 1, beam_options, args.repeats)
    return runs, timing


def summarise(runs: list[dict], texts: int, small: int, cores: int) -> dict:
    """Median small and full runs, the throughput from their difference, the start-up left."""
    small_s = statistics.median(r["seconds"] for r in runs if r["corpus"] == "small")
    full_s = statistics.median(r["seconds"] for r in runs if r["corpus"] == "full")
    rate = (texts - small) / (full_s - small_s)
    return {
        "runs": runs,
        "small_s": small_s,
        "full_s": full_s,
        "warmup_s": runs[0]["seconds"],
        "texts_per_s": rate,
        "texts_per_s_per_core": rate / cores,
        "startup_per_stage_s": small_s - small / rate,
        "texts_per_s_with_startup": texts / full_s,
    }


def ratios(variants: dict[str, dict]) -> dict[str, float]:
    """Each cluster's throughput per worker over the local runner's per core, same cores."""
    per_core = {name: entry["texts_per_s_per_core"] for name, entry in variants.items()}
    found = {}
    for name in per_core:
        engine, _, cores = name.partition("-")
        if engine != "local":
            found[f"{engine}_{cores}_per_worker_over_local_{cores}_per_core"] = (
                per_core[name] / per_core[f"local-{cores}"]
            )
    if "dask-1" in variants:
        found["dask_2_workers_over_1_worker"] = (
            variants["dask-2"]["texts_per_s"] / variants["dask-1"]["texts_per_s"]
        )
    return found


def write_corpus(texts: list[str], path: Path) -> str:
    """The texts as a JSONL corpus with ids ``r0, r1, ...``."""
    with path.open("w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"id": f"r{i}", "text": text}) + "\n")
    return str(path)


def machine_facts() -> dict:
    """What else decides the figures: usable cores, CPU features, library versions."""
    import apache_beam
    import distributed
    import torch

    from sbert_core.inference.cpu_features import detect_cpu_features

    return {
        "usable_cores": len(os.sched_getaffinity(0)),
        "cpu_features": detect_cpu_features().as_dict(),
        "torch": torch.__version__,
        "apache_beam": apache_beam.__version__,
        "distributed": distributed.__version__,
    }


def print_report(variants: dict[str, dict], cluster: dict, found: dict, path: Path) -> None:
    """The table, the clusters' start-up, then the ratios (last)."""
    for name, entry in variants.items():
        print(
            f"{name:<8} small {entry['small_s']:6.1f} s  full {entry['full_s']:6.1f} s  "
            f"{entry['texts_per_s']:6.1f} texts/s  {entry['texts_per_s_per_core']:6.1f} per "
            f"{'core' if name.startswith('local') else 'worker'}  start-up per stage "
            f"{entry['startup_per_stage_s']:5.1f} s"
        )
    for name, timing in cluster.items():
        extra = (
            f" (job server JVM {timing['job_server_jvm_s']} s)"
            if "job_server_jvm_s" in timing
            else ""
        )
        start, close = timing["start_s"], timing["close_s"]
        print(f"{name:<8} cluster start {start:.1f} s{extra}, close {close:.1f} s")
    print(f"results: {path}")
    print(
        "per worker / local per core: "
        + ", ".join(
            f"{key.split('_per_worker')[0]} {value:.2f}"
            for key, value in found.items()
            if "per_worker" in key
        )
        + f" (goal {GOAL_PER_WORKER})"
    )


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--texts", type=int, default=DEFAULT_TEXTS, help="texts to embed")
    parser.add_argument("--small", type=int, default=300, help="texts of the small corpus")
    parser.add_argument("--repeats", type=int, default=2, help="small and full runs per variant")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--no-spark", action="store_true", help="leave the Spark cluster out")
    args = parser.parse_args()
    if not 0 < args.small < args.texts:
        parser.error("--small must be between 0 and --texts")

    rows = read_tsv(DATA_DIR / "corpus" / "short_texts_en.tsv.gz")[: args.texts]
    texts = [row["text"] for row in rows]
    chosen = [v for v in VARIANTS if not (args.no_spark and v.engine == "spark")]
    with tempfile.TemporaryDirectory(prefix="engines-") as folder:
        corpora = {
            "small": write_corpus(texts[: args.small], Path(folder) / "small.jsonl"),
            "full": write_corpus(texts, Path(folder) / "full.jsonl"),
        }
        load_before = os.getloadavg()
        model_load = in_fresh_process(model_load_seconds, args.model)
        variants, cluster = {}, {}
        for variant in chosen:
            runs, timing = run_variant(variant, corpora, args)
            sizes = {"warmup": args.small, "small": args.small, "full": len(texts)}
            assert all(r["embedded"] == sizes[r["corpus"]] and r["rejected"] == 0 for r in runs), (
                runs
            )
            variants[variant.name] = summarise(runs, len(texts), args.small, variant.cores)
            if timing:
                cluster[variant.name] = timing
            print(f"{variant.name}: done", flush=True)
        load_after = os.getloadavg()
    found = ratios(variants)
    name = "engines" if args.texts == DEFAULT_TEXTS else f"engines_n{args.texts}"
    path = write_result(
        name,
        {
            "texts": len(texts),
            "small": args.small,
            "model": args.model,
            "repeats": args.repeats,
            "machine_facts": machine_facts(),
            "load_average_before_after": [load_before, load_after],
            "model_load_s": model_load,
            "cluster": cluster,
            "variants": variants,
            "ratios": found,
            "goal_per_worker_over_local_per_core": GOAL_PER_WORKER,
        },
    )
    print_report(variants, cluster, found, path)


if __name__ == "__main__":
    main()
