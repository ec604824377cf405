"""Helpers shared by the benchmarks: data loading, timing, and result files."""

from __future__ import annotations

import csv
import gzip
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("SBERT_DATA_DIR", ROOT.parent / "shared" / "data"))
RESULTS_DIR = ROOT / "benchmarks" / "results"


def read_tsv(path: Path) -> list[dict[str, str]]:
    """Read one of the shared gzip TSV files (quoting off)."""
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def stsb_sentences(splits=("train", "dev", "test")) -> list[str]:
    """Distinct STSb sentences of the given splits, in first-seen order."""
    sentences: dict[str, None] = {}
    for split in splits:
        for row in read_tsv(DATA_DIR / "stsb" / f"{split}.tsv.gz"):
            sentences.setdefault(row["sentence1"])
            sentences.setdefault(row["sentence2"])
    return list(sentences)


def interleaved_medians(
    contenders: dict[str, Callable[[], object]], repeats: int
) -> dict[str, dict]:
    """Run each contender ``repeats`` times, alternating between them; median and all times."""
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: {"median_s": statistics.median(t), "runs_s": t} for name, t in times.items()}


def write_result(name: str, result: dict) -> Path:
    """Write ``benchmarks/results/<name>.json`` with machine facts added."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    result = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "node": platform.node(),
        },
        **result,
    }
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
