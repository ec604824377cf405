"""Dask scaling: the embed stage on a Dask cluster of 1 and 2 worker processes against the local
runner on the same number of cores, same texts, same model, in one run.

Reads the first ``--texts`` texts of ``../shared/data/corpus`` (default 3,000), writes them as a
JSONL corpus, then measures four variants in turn:

* ``local-1`` / ``local-2``: the embed stage on the local runner with 1 / 2 torch threads;
* ``dask-1`` / ``dask-2``: the same stage on a ``distributed.LocalCluster`` of 1 / 2 worker
  processes with 1 thread each (1 torch thread per worker), started here.

Each variant runs the stage ``--repeats`` times (default 2) in one fresh launcher process, so
the first run is cold (each process imports the runner and loads the model) and the later ones
are warm (a worker process that keeps its model does not load it again). Only the stage run
is timed: the cluster's start and close are reported apart (``cluster``), and so is the model
load alone in a fresh process (``model_load_s``).

    python -m benchmarks.dask_scaling [--texts 3000] [--repeats 2] [--dask-runner dask]

The last lines are the ratios, on warm runs (the first run when ``--repeats 1``): a Dask
worker's throughput over the local runner's per core (1 worker vs 1 core, 2 workers vs 2
cores; goal 0.8) and 2 workers over 1 worker (goal 1.7). ``--texts 3000`` writes
``benchmarks/results/dask_scaling.json``; another size adds ``_n<texts>`` to the name.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from benchmarks.common import DATA_DIR, read_tsv, write_result
from benchmarks.parser import benchmark_parser

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DEFAULT_TEXTS = 3000
GOAL_PER_WORKER = 0.8
GOAL_TWO_OVER_ONE = 1.7


@dataclass(frozen=True)
class Variant:
    """One way to run the stage: ``workers`` Dask processes, or the local runner (0)."""

    name: str
    cores: int
    workers: int = 0


VARIANTS = (
    Variant("local-1", cores=1),
    Variant("dask-1", cores=1, workers=1),
    Variant("local-2", cores=2),
    Variant("dask-2", cores=2, workers=2),
)


def measure(
    corpus: str, work: str, model: str, threads: int, beam_options: list[str], repeats: int
):
    """Run the embed stage ``repeats`` times in this process; seconds and counts of each run.

    Called in a fresh process per variant, so the first run pays the model load wherever the
    model is loaded, as a user's first run does.
    """
    from sbert_pipeline import embed

    runs = []
    for repeat in range(repeats):
        options = embed.Options(
            input=corpus,
            output=str(Path(work) / f"out-{repeat}"),
            id_field="id",
            model=model,
            threads=threads,
            beam_options=tuple(beam_options),
        )
        start = time.perf_counter()
        summary = embed.run(options).summary
        runs.append(
            {
                "seconds": time.perf_counter() - start,
                "embedded": summary.embedded,
                "rejected": summary.rejected,
                "manifest_seconds": summary.seconds,
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


def run_variant(variant: Variant, corpus: Path, args) -> tuple[list[dict], dict | None]:
    """(runs, cluster timings) of one variant; the cluster is started and closed here."""
    work = tempfile.mkdtemp(prefix=f"dask-scaling-{variant.name}-", dir=corpus.parent)
    if not variant.workers:
        runs = in_fresh_process(
            measure, str(corpus), work, args.model, variant.cores, [], args.repeats
        )
        return runs, None
    from distributed import Client, LocalCluster
    from sbert_pipeline.stage_api.dask_cluster import worker_environ

    start = time.perf_counter()
    with worker_environ():  # the worker environment of `local[N]`
        cluster = LocalCluster(
            n_workers=variant.workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
    client = Client(cluster)
    client.wait_for_workers(variant.workers)
    started = time.perf_counter() - start
    pids_before = sorted(client.run(os.getpid).values())
    beam_options = [
        f"--runner={args.dask_runner}",
        f"--dask_client_address={cluster.scheduler_address}",
    ]
    try:
        runs = in_fresh_process(
            measure, str(corpus), work, args.model, 1, beam_options, args.repeats
        )
        # The same worker processes before and after: no worker died and was replaced.
        same_workers = sorted(client.run(os.getpid).values()) == pids_before
    finally:
        start = time.perf_counter()
        client.close()
        cluster.close()
        closed = time.perf_counter() - start
    return runs, {"start_s": started, "close_s": closed, "same_worker_processes": same_workers}


def summarise(runs: list[dict], texts: int, cores: int) -> dict:
    """Cold (first) and warm (median of the others) seconds and the throughputs they give."""
    seconds = [run["seconds"] for run in runs]
    warm = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    return {
        "runs": runs,
        "cold_s": seconds[0],
        "warm_s": warm,
        "first_run_extra_s": seconds[0] - warm,
        "texts_per_s": texts / warm,
        "texts_per_s_cold": texts / seconds[0],
        "texts_per_s_per_core": texts / warm / cores,
    }


def ratios(variants: dict[str, dict], key: str) -> dict[str, float]:
    """The goal ratios from the throughputs under ``key`` (warm or cold)."""
    rate = {name: entry[key] for name, entry in variants.items()}
    return {
        "dask_1_worker_over_local_1_core": rate["dask-1"] / rate["local-1"],
        "dask_2_workers_over_local_2_cores": rate["dask-2"] / rate["local-2"],
        "dask_2_workers_over_1_worker": rate["dask-2"] / rate["dask-1"],
    }


def write_corpus(texts: list[str], folder: Path) -> Path:
    """The texts as a JSONL corpus with ids ``r0, r1, ...``."""
    corpus = folder / "corpus.jsonl"
    with corpus.open("w", encoding="utf-8") as handle:
        for i, text in enumerate(texts):
            handle.write(json.dumps({"id": f"r{i}", "text": text}) + "\n")
    return corpus


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


def print_report(variants: dict[str, dict], cluster: dict, warm: dict, cold: dict, path: Path):
    """The table, the cluster timings, then the ratios (last)."""
    for name, entry in variants.items():
        print(
            f"{name:<8} cold {entry['cold_s']:7.1f} s  warm {entry['warm_s']:7.1f} s  "
            f"{entry['texts_per_s']:7.1f} texts/s  {entry['texts_per_s_per_core']:7.1f} per "
            + ("worker" if name.startswith("dask") else "core")
        )
    for name, timing in cluster.items():
        print(f"{name:<8} cluster start {timing['start_s']:.1f} s, close {timing['close_s']:.1f} s")
    print(f"results: {path}")
    for label, values in (("cold", cold), ("warm", warm)):
        one = values["dask_1_worker_over_local_1_core"]
        two = values["dask_2_workers_over_local_2_cores"]
        scaling = values["dask_2_workers_over_1_worker"]
        print(
            f"{label}: dask worker / local core: 1 worker {one:.2f}, 2 workers {two:.2f} "
            f"(goal {GOAL_PER_WORKER}); 2 workers / 1 worker {scaling:.2f} "
            f"(goal {GOAL_TWO_OVER_ONE})"
        )


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--texts", type=int, default=DEFAULT_TEXTS, help="texts to embed")
    parser.add_argument("--repeats", type=int, default=2, help="stage runs per variant")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument(
        "--dask-runner",
        default=DASK_RUNNER,
        help="how the runner is named: dask, or Beam's full class path (the default)",
    )
    args = parser.parse_args()

    rows = read_tsv(DATA_DIR / "corpus" / "short_texts_en.tsv.gz")[: args.texts]
    texts = [row["text"] for row in rows]
    with tempfile.TemporaryDirectory(prefix="dask-scaling-") as folder:
        corpus = write_corpus(texts, Path(folder))
        load_before = os.getloadavg()
        model_load = in_fresh_process(model_load_seconds, args.model)
        variants, cluster = {}, {}
        for variant in VARIANTS:
            runs, timing = run_variant(variant, corpus, args)
            assert all(run["embedded"] == len(texts) and run["rejected"] == 0 for run in runs)
            variants[variant.name] = summarise(runs, len(texts), variant.cores)
            if timing:
                cluster[variant.name] = timing
        load_after = os.getloadavg()
    warm = ratios(variants, "texts_per_s")
    cold = ratios(variants, "texts_per_s_cold")
    name = "dask_scaling" if args.texts == DEFAULT_TEXTS else f"dask_scaling_n{args.texts}"
    path = write_result(
        name,
        {
            "texts": len(texts),
            "model": args.model,
            "dask_runner": args.dask_runner,
            "repeats": args.repeats,
            "machine_facts": machine_facts(),
            "load_average_before_after": [load_before, load_after],
            "model_load_s": model_load,
            "cluster": cluster,
            "variants": variants,
            "ratios_warm": warm,
            "ratios_cold": cold,
            "goals": {
                "per_worker_over_local_per_core": GOAL_PER_WORKER,
                "two_over_one": GOAL_TWO_OVER_ONE,
            },
        },
    )
    print_report(variants, cluster, warm, cold, path)


if __name__ == "__main__":
    main()
