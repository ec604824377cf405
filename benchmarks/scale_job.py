"""``sbert run`` at scale under one memory budget: index, cluster, pairs and dedup on planted
vectors, each stage's wall time, peak RSS and peak temporary disk (issue 29, item 7).

For each ``--n`` the script writes N planted unit vectors (dim ``--dim``, no embedding, so it
runs fast) as an embed output folder, block by block, and runs::

    python -m sbert_pipeline.jobs.cli run job.yaml     # stages [index, cluster, pairs, dedup],
    embeddings: DIR
                                        # memory_budget: 4GB, pairs clustered >= 0.8, dedup star

as a child process. Half the rows are "originals" around ``--centres`` random centres (cosine
about 0.5 within a centre, like topics); the other half are near-duplicates of originals of
the same block (noise giving a cosine of 0.91 to 0.99 to their original), so each original has
0, 1, 2 ... copies: near-duplicate groups of varied size, as in the 2M job of the issue.

Measured per stage, from outside the job's process:
- wall time: between the job's ``[i/n] STAGE: running`` and ``done`` lines;
- peak RSS: a thread reads ``VmRSS`` of the job's process and all its descendants every 0.2 s
  (their sum) and gives the sample to the stage whose ``running`` line came last; the job's
  own record (``_job_state.json``: the process's peak at the stage's end, monotonic across
  stages) is kept next to it;
- peak temporary disk: every 0.5 s, the bytes under the job folder's ``_work`` and
  ``_attempts`` folders (a stage's scratch and its unpublished output) plus the job's own
  ``TMPDIR`` (a folder of the run);
- the vectors' size (their Parquet files, and N x dim x 4 bytes of float32).

Goals (issue 29) printed next to the numbers: peak RSS <= the budget; temporary disk <= 1.5x
the vectors; pairs + dedup at 2M at least 2x faster than the 1,990 s of the issue's run. The
table comes first, then a line per goal; the LAST line is the largest peak RSS / budget. JSON
in ``benchmarks/results/NAME.json``.

    python -m benchmarks.scale_job [--n 1000000 2000000 5000000] [--budget 4GB]
        [--workdir DIR] [--keep] [--name scale_job]
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml
from sbert_pipeline.io.schemas import embeddings_table
from sbert_pipeline.io.sizes import format_size, parse_size

from benchmarks.common import ROOT, write_result
from benchmarks.parser import benchmark_parser

STAGES = ("index", "cluster", "pairs", "dedup")
BLOCK = 100_000  # rows generated and written at a time (one Parquet shard)
RSS_EVERY, DISK_EVERY = 0.2, 0.5  # seconds between samples
TEMP_FOLDERS = ("_work", "_attempts")
# The issue's 2M run: pairs 970 s + dedup 1,020 s; the goal is at least 2x faster.
ISSUE_PAIRS_DEDUP_2M, GOAL_SPEEDUP, GOAL_DISK_RATIO = 1_990.0, 2.0, 1.5
STAGE_LINE = re.compile(r"^\[\d+/\d+\] (\w+): (running|done|FAILED|skipped)")
MODEL = {
    "model_id": "planted-near-duplicates",
    "weights_sha256": "0" * 64,
    "pooling": "mean",
    "normalized": True,
    "max_seq_length": 128,
}


def planted_block(
    block: int, rows: int, dim: int, centres: np.ndarray, seed: int
) -> tuple[np.ndarray, int]:
    """One block of planted unit rows (float32) and how many of them are near-duplicates.

    Half the rows are originals around ``centres``; each other row copies a random original
    of the block plus noise of norm 0.15 to 0.45 (cosine 0.91 to 0.99 to it); rows shuffled.
    """
    rng = np.random.default_rng([seed, block])
    originals = rows - rows // 2
    labels = rng.integers(0, len(centres), originals)
    base = centres[labels] + rng.standard_normal((originals, dim), dtype=np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    copies = rows - originals
    of = rng.integers(0, originals, copies)
    norm = rng.uniform(0.15, 0.45, (copies, 1)).astype(np.float32)
    noise = rng.standard_normal((copies, dim), dtype=np.float32)
    noise *= norm / np.linalg.norm(noise, axis=1, keepdims=True)
    near = base[of] + noise
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    vectors = np.concatenate([base, near])
    return vectors[rng.permutation(rows)], copies


def write_planted(folder: Path, n: int, dim: int, centres: int, seed: int) -> dict:
    """An embed-output folder (Parquet shards of :data:`BLOCK` rows, ``_manifest.json``) of
    ``n`` planted rows, ids ``r000000000`` ...; returns what was planted."""
    folder.mkdir(parents=True)
    # Centres scaled so that a row's cosine to another of its centre is about 0.5.
    rng = np.random.default_rng(seed)
    scale = np.float32(np.sqrt(dim))
    centre_rows = rng.standard_normal((centres, dim), dtype=np.float32)
    centre_rows *= scale / np.linalg.norm(centre_rows, axis=1, keepdims=True)
    shards, copies = [], 0
    count = (n + BLOCK - 1) // BLOCK
    for block in range(count):
        first = block * BLOCK
        rows = min(BLOCK, n - first)
        vectors, near = planted_block(block, rows, dim, centre_rows, seed)
        copies += near
        ids = [f"r{i:09d}" for i in range(first, first + rows)]
        table = embeddings_table(
            ids, vectors, np.zeros(rows, np.int32), np.zeros(rows, bool), texts=None
        )
        name = f"part-{block:05d}-of-{count:05d}.parquet"
        pq.write_table(table, folder / name, row_group_size=10_000)
        shards.append(name)
    manifest = {
        "kind": "embeddings",
        **MODEL,
        "dim": dim,
        "dtype": "float32",
        "counts": {"read": n, "embedded": n, "rejected": 0},
        "keep_text": False,
        "shards": shards,
    }
    (folder / "_manifest.json").write_text(json.dumps(manifest))
    return {"rows": n, "near_duplicates": copies, "centres": centres, "dim": dim}


def tree_rss(root: int) -> int:
    """Bytes of ``VmRSS`` of ``root`` and all its descendants now (0 once it has gone)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                # The command name may hold spaces and brackets: the fields follow the last ')'.
                parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return sum(_status_kib(pid, "VmRSS") for pid in tree) * 1024


def _status_kib(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def temp_bytes(job_dir: Path, tmp_dir: Path) -> int:
    """Bytes under the job's ``_work`` / ``_attempts`` folders and its ``TMPDIR`` now."""
    total = _tree_bytes(tmp_dir)
    for current, folders, _ in os.walk(job_dir):
        for name in [f for f in folders if f in TEMP_FOLDERS]:
            total += _tree_bytes(Path(current) / name)
            folders.remove(name)  # counted whole
    return total


def _tree_bytes(folder: Path) -> int:
    total = 0
    for current, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(current, name)).st_size
            except OSError:  # removed between the listing and the stat
                continue
    return total


@dataclass
class Watch:
    """What the sampling threads saw of one job, per stage."""

    stage: str | None = None
    started: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    rss: dict[str, int] = field(default_factory=dict)
    temp: dict[str, int] = field(default_factory=dict)
    failed: str | None = None
    lines: list[str] = field(default_factory=list)

    def see(self, line: str) -> None:
        """Follow the job's stage lines (``[i/n] STAGE: running`` ... ``done``)."""
        self.lines.append(line)
        match = STAGE_LINE.match(line)
        if match is None:
            return
        stage, what = match.groups()
        if what == "running":
            self.stage, self.started[stage] = stage, time.perf_counter()
        elif what in ("done", "FAILED") and stage in self.started:
            self.seconds[stage] = time.perf_counter() - self.started[stage]
            self.stage = None
            if what == "FAILED":
                self.failed = stage

    def sample(self, kind: dict[str, int], value: int) -> None:
        stage = self.stage
        if stage is not None:
            kind[stage] = max(kind.get(stage, 0), value)


def run_job(config: Path, job_dir: Path, tmp_dir: Path, log: Path) -> tuple[Watch, int, float]:
    """Run ``sbert run config`` in a child process, sampling it; (watch, exit status, wall s)."""
    watch, done = Watch(), threading.Event()
    env = {**os.environ, "TMPDIR": str(tmp_dir), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "sbert_pipeline.jobs.cli", "run", str(config)]
    start = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )

    def rss() -> None:
        while not done.is_set():
            watch.sample(watch.rss, tree_rss(process.pid))
            done.wait(RSS_EVERY)

    def disk() -> None:
        while not done.is_set():
            watch.sample(watch.temp, temp_bytes(job_dir, tmp_dir))
            done.wait(DISK_EVERY)

    threads = [threading.Thread(target=target, daemon=True) for target in (rss, disk)]
    for thread in threads:
        thread.start()
    with log.open("w") as out:
        for line in process.stdout:
            out.write(line)
            watch.see(line.rstrip("\n"))
            if STAGE_LINE.match(line):
                print(f"    {line.rstrip()[:160]}", flush=True)
    status = process.wait()
    done.set()
    for thread in threads:
        thread.join()
    return watch, status, time.perf_counter() - start


def job_config(job_dir: Path, vectors: Path, budget: str, k: int) -> dict:
    """The job: index, cluster, pairs (clustered, 0.8) and dedup (star) on ``vectors``."""
    return {
        "job_dir": str(job_dir),
        "embeddings": str(vectors),
        "memory_budget": budget,
        "stages": list(STAGES),
        "cluster": {"k": k},
        "pairs": {"method": "clustered", "threshold": 0.8},
        "dedup": {"method": "star"},
    }


def measure(n: int, args, work: Path) -> dict:
    """Plant ``n`` vectors, run the job, and gather the numbers of each stage."""
    vectors, job_dir, tmp_dir = work / "vectors", work / "job", work / "tmp"
    tmp_dir.mkdir(parents=True)
    began = time.perf_counter()
    planted = write_planted(vectors, n, args.dim, args.centres, args.seed)
    planting = time.perf_counter() - began
    parquet_bytes = _tree_bytes(vectors)
    raw_bytes = n * args.dim * 4
    print(
        f"N = {n:,} x {args.dim}: planted in {planting:.1f}s ({planted['near_duplicates']:,} "
        f"near-duplicates), {format_size(parquet_bytes)} of Parquet",
        flush=True,
    )
    config = work / "job.yaml"
    k = max(2, min(args.k, n // 20))
    config.write_text(yaml.safe_dump(job_config(job_dir, vectors, args.budget, k)))
    watch, status, wall = run_job(config, job_dir, tmp_dir, work / "job.log")
    state_path = job_dir / "_job_state.json"
    recorded = json.loads(state_path.read_text())["stages"] if state_path.is_file() else {}
    stages = {}
    for stage in STAGES:
        record = recorded.get(stage, {})
        stages[stage] = {
            "seconds": watch.seconds.get(stage),
            "peak_rss_bytes": watch.rss.get(stage),
            "peak_temp_bytes": watch.temp.get(stage, 0) if stage in watch.seconds else None,
            "job_state_seconds": record.get("seconds"),
            "job_state_peak_rss_bytes": record.get("peak_rss"),
            "job_state_peak_rss_at_start_bytes": record.get("peak_rss_at_start"),
        }
    result = {
        "n": n,
        "planted": planted,
        "planting_seconds": planting,
        "vectors_parquet_bytes": parquet_bytes,
        "vectors_float32_bytes": raw_bytes,
        "returncode": status,
        "wall_seconds": wall,
        "failed_stage": watch.failed,
        "stages": stages,
        "facts": _facts(job_dir),
    }
    if status != 0:
        result["log_tail"] = watch.lines[-15:]
        print("\n".join(f"    | {line}" for line in watch.lines[-15:]), flush=True)
    return result


def _facts(job_dir: Path) -> dict:
    """Key numbers of the outputs (index factory and recall, pairs, dedup counts) and each
    stage's own memory record (its budget check: what it counted, what the process held)."""
    facts = {}
    for folder, keys in (
        ("index", ("factory", "ntotal", "recall_at_10", "memory_estimate_bytes", "plan")),
        ("clusters", ("memory_budget", "memory_needed")),
        ("pairs", ("method", "counts", "memory_budget", "worker_memory_bytes")),
        ("dedup", ("counts", "memory")),
    ):
        path = job_dir / folder / "_manifest.json"
        if path.is_file():
            manifest = json.loads(path.read_text())
            facts[folder] = {key: manifest.get(key) for key in keys}
    return facts


def report(runs: list[dict], budget: int) -> list[str]:
    """The table, a line per goal, and last the largest peak RSS / budget."""
    lines = [
        f"{'N':>10}  {'stage':<8} {'time':>9} {'peak RSS':>11} {'RSS/budget':>10} "
        f"{'temp disk':>11} {'temp/vectors':>12}"
    ]
    worst, worst_at = 0.0, ""
    for run in runs:
        vectors = run["vectors_float32_bytes"]
        for stage, numbers in run["stages"].items():
            rss, temp, seconds = (
                numbers["peak_rss_bytes"],
                numbers["peak_temp_bytes"],
                numbers["seconds"],
            )
            if seconds is None:
                lines.append(f"{run['n']:>10,}  {stage:<8} {'not run':>9}")
                continue
            ratio = rss / budget if rss else 0.0
            if ratio > worst:
                worst, worst_at = ratio, f"{stage} at N = {run['n']:,}"
            lines.append(
                f"{run['n']:>10,}  {stage:<8} {seconds:>8.1f}s {format_size(rss or 0):>11} "
                f"{ratio:>10.2f} {format_size(temp or 0):>11} {(temp or 0) / vectors:>12.2f}"
            )
    lines += [outcome(run) for run in runs]
    lines += goals(runs, budget)
    lines.append(
        f"largest peak RSS / budget: {worst:.2f} ({worst_at or 'no stage ran'}; budget "
        f"{format_size(budget)})"
    )
    return lines


def outcome(run: dict) -> str:
    """What the job made of the planted rows: the index, the pairs, the rows dedup removed."""
    facts, n = run["facts"], run["n"]
    if run["returncode"] != 0:
        return f"N = {n:,}: the job failed (exit {run['returncode']}) in {run['failed_stage']}"
    index, pairs, dedup = facts["index"], facts["pairs"]["counts"], facts["dedup"]["counts"]
    return (
        f"N = {n:,}: index {index['factory']} recall@10 {index['recall_at_10']}, "
        f"{pairs['pairs']:,} pairs >= 0.8, dedup removed {dedup['removed']:,} rows "
        f"({run['planted']['near_duplicates']:,} near-duplicates planted) in "
        f"{run['wall_seconds']:.0f} s"
    )


def goals(runs: list[dict], budget: int) -> list[str]:
    """One line per goal of the issue, with the numbers measured against it."""
    ran = [(r, s, v) for r in runs for s, v in r["stages"].items() if v["seconds"] is not None]
    over = [f"{s} at {r['n']:,}" for r, s, v in ran if (v["peak_rss_bytes"] or 0) > budget]
    disk = [
        f"{s} at {r['n']:,}"
        for r, s, v in ran
        if (v["peak_temp_bytes"] or 0) > GOAL_DISK_RATIO * r["vectors_float32_bytes"]
    ]
    lines = [
        f"goal peak RSS <= budget ({format_size(budget)}): "
        + ("met" if not over else f"NOT met by {', '.join(over)}"),
        f"goal temporary disk <= {GOAL_DISK_RATIO}x the vectors (float32): "
        + ("met" if not disk else f"NOT met by {', '.join(disk)}"),
    ]
    at_2m = [r for r in runs if r["n"] == 2_000_000]
    target = ISSUE_PAIRS_DEDUP_2M / GOAL_SPEEDUP
    if not at_2m or any(at_2m[0]["stages"][s]["seconds"] is None for s in ("pairs", "dedup")):
        lines.append(f"goal pairs + dedup at 2M <= {target:,.0f} s: not measured (no 2M run)")
    else:
        took = sum(at_2m[0]["stages"][s]["seconds"] for s in ("pairs", "dedup"))
        verdict = "met" if took <= target else "NOT met"
        lines.append(
            f"goal pairs + dedup at 2M <= {target:,.0f} s (2x faster than "
            f"{ISSUE_PAIRS_DEDUP_2M:,.0f} s): {took:,.0f} s, {ISSUE_PAIRS_DEDUP_2M / took:.1f}x, "
            f"{verdict}"
        )
    return lines


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument(
        "--n", type=int, nargs="+", default=[1_000_000, 2_000_000, 5_000_000], help="rows"
    )
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--centres", type=int, default=1000, help="topics of the originals")
    parser.add_argument("--k", type=int, default=1000, help="clusters (at most N / 20)")
    parser.add_argument("--budget", default="4GB", help="the job's memory_budget")
    parser.add_argument("--workdir", type=Path, help="where the vectors and jobs go (a tmp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the vectors and job folders")
    parser.add_argument("--name", default="scale_job", help="results file name")
    args = parser.parse_args()
    budget = parse_size(args.budget)
    base = Path(tempfile.mkdtemp(prefix="scale_job_", dir=args.workdir))
    runs = []
    try:
        for n in args.n:
            work = base / f"n{n}"
            runs.append(measure(n, args, work))
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    lines = report(runs, budget)
    path = write_result(
        args.name,
        {
            "budget": args.budget,
            "budget_bytes": budget,
            "dim": args.dim,
            "centres": args.centres,
            "load_average": os.getloadavg(),
            "runs": runs,
            "summary": lines,
        },
    )
    print(f"results: {path.relative_to(ROOT)}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
