"""``sbert embed --exact-dedup`` against ``sbert embed`` on QQP dev questions (issue 15 item 3).

Contenders, on the same corpus (the first ``--n`` questions of QQP dev, as JSONL), the packaged
all-MiniLM-L6-v2 with ``--compute-dtype`` (default bfloat16):

- plain: ``python -m sbert_pipeline.jobs.cli embed --input CORPUS --output OUT --id-field qid
--text-field
  question --compute-dtype D``;
- exact: the same with ``--exact-dedup``.

Each runs in a subprocess, timed from start to exit; its CPU seconds (user + system, all
threads, from ``wait4``) are the work done, which on a machine shared with other jobs varies far
less than wall time. With ``--repeats R`` the two alternate R times (plain, exact, plain, ...)
and the ratios use each one's fastest run. Texts embedded and copies come from the manifests.

``--variants V`` writes every question V times, the copies changed in case, spacing and
punctuation (a corpus with known normalised copies: (V - 1) / V of the rows), to show what the
option saves where copies are common; V = 1 (default) is QQP as it is (0.25% copies in dev).

    python -m benchmarks.exact_dedup_embed [--n 20000] [--variants 1] [--repeats 1]
        [--compute-dtype bfloat16] [--name exact_dedup_embed]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sbert_pipeline.io.text_normal import first_copies

from benchmarks.common import DATA_DIR, ROOT, read_tsv, write_result
from benchmarks.parser import benchmark_parser

QUESTIONS = DATA_DIR / "qqp" / "dev_questions.tsv.gz"


def _variant(text: str, number: int) -> str:
    """The ``number``-th copy of a text: same normalised text, different characters."""
    forms = (text.upper(), f"  {text.lower()} ?!", text.replace(" ", "   ") + "...")
    return forms[(number - 1) % len(forms)]


def write_corpus(path: Path, n: int, variants: int) -> int:
    """The first ``n`` questions (each ``variants`` times) as JSONL; returns the rows written."""
    rows = read_tsv(QUESTIONS)[:n]
    written = 0
    with path.open("w", encoding="utf-8") as handle:
        for copy in range(variants):
            for row in rows:
                text = row["question"] if copy == 0 else _variant(row["question"], copy)
                qid = row["qid"] if copy == 0 else f"{row['qid']}~{copy}"
                handle.write(json.dumps({"qid": qid, "question": text}) + "\n")
                written += 1
    return written


def run_embed(corpus: Path, out: Path, compute_dtype: str, exact: bool) -> dict:
    """One ``sbert embed`` in a subprocess: wall and CPU seconds, and its manifest's counts."""
    command = [sys.executable, "-m", "sbert_pipeline.jobs.cli", "embed", "--input", str(corpus)]
    command += ["--output", str(out), "--id-field", "qid", "--text-field", "question"]
    command += ["--compute-dtype", compute_dtype, "--overwrite"]
    command += ["--exact-dedup"] if exact else []
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = process.stdout.read().decode("utf-8", "replace")
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{output[-3000:]}")
    manifest = json.loads((out / "_manifest.json").read_text())
    counts = manifest["counts"]
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "job_s": manifest["seconds"],
        "rows": counts["embedded"],
        "texts_embedded": counts.get("distinct_texts", counts["embedded"]),
        "copies": counts.get("copies", 0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--n", type=int, default=20000, help="QQP dev questions")
    parser.add_argument("--variants", type=int, default=1, help="rows per question")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--compute-dtype", default="bfloat16")
    parser.add_argument("--name", default="exact_dedup_embed")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="exact_dedup_bench_") as tmp:
        corpus = Path(tmp) / "in" / "questions.jsonl"
        corpus.parent.mkdir()
        rows = write_corpus(corpus, args.n, args.variants)
        texts = [json.loads(line)["question"] for line in corpus.read_text().splitlines()]
        expected_copies = int((first_copies(texts) != np.arange(len(texts))).sum())
        runs: dict[str, list[dict]] = {"plain": [], "exact": []}
        for _ in range(args.repeats):
            for name in runs:
                load = os.getloadavg()[0]
                result = run_embed(corpus, Path(tmp) / name, args.compute_dtype, name == "exact")
                runs[name].append({**result, "load_before": round(load, 2)})
                print(name, runs[name][-1], flush=True)
    best = {name: min(found, key=lambda run: run["cpu_s"]) for name, found in runs.items()}
    if best["exact"]["copies"] != expected_copies:
        raise RuntimeError(f"copies {best['exact']['copies']} != counted {expected_copies}")
    ratios = {
        key: round(best["exact"][key] / best["plain"][key], 3)
        for key in ("cpu_s", "wall_s", "texts_embedded")
    }
    path = write_result(
        args.name,
        {
            "n_questions": args.n,
            "variants": args.variants,
            "rows": rows,
            "copies": expected_copies,
            "compute_dtype": args.compute_dtype,
            "runs": runs,
            "exact_over_plain": ratios,
        },
    )
    print(
        f"{rows} rows, {expected_copies} copies: exact-dedup embedded "
        f"{best['exact']['texts_embedded']} texts in {best['exact']['cpu_s']} CPU s "
        f"({best['exact']['wall_s']} s wall), plain {best['plain']['texts_embedded']} in "
        f"{best['plain']['cpu_s']} CPU s ({best['plain']['wall_s']} s wall); exact/plain CPU "
        f"{ratios['cpu_s']}, wall {ratios['wall_s']} -> {path}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
