"""The whole ``sbert dedup`` stage on a synthetic pairs folder: wall time and peak RSS (issue 29,
item 3).

The data (:func:`write_folders`): an ``embeddings/`` folder of ``--rows`` ids (4-d random
vectors: dedup reads only the ids) and a ``pairs/`` folder of ``--pairs`` pairs written with the
pairs stage's own writer (:func:`sbert_pipeline.pairs.output_tables.pairs_table`), the planted group
structure of :func:`benchmarks.dedup_scale.planted_pairs` (groups of 2 to 64 rows, scores
uniform in [0.8, 1)), pairs threshold 0.8. Both folders get manifests as the stages write them
(without a commit section, so their files are read unchecked).

Each run is ``sbert dedup --threshold T --dry-run`` (or with ``--output``) in a child process
started with ``PYTHONPATH=<--code>``, so an older checkout (``git worktree add /tmp/old HEAD``)
is timed on the same folders; the child's wall time and peak RSS (``ru_maxrss`` of the waited
child) are reported.

    python -m benchmarks.dedup_stage_scale --rows 2000000 --pairs 10000000 \
        --code /tmp/old --code . [--extra "--sweep all"]

JSON in ``benchmarks/results/dedup_stage_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from sbert_pipeline.io.schemas import PAIRS_SCHEMA, embeddings_table
from sbert_pipeline.pairs.output_tables import pairs_table, part_path
from sbert_pipeline.pairs.settings import write_parquet

from benchmarks.common import ROOT, write_result
from benchmarks.dedup_scale import planted_pairs

MODEL = {
    "model_id": "planted",
    "weights_sha256": "0" * 64,
    "pooling": "mean",
    "normalized": True,
    "max_seq_length": 48,
    "dim": 4,
}
PAIRS_THRESHOLD = 0.8
PARTS = 8


def write_folders(folder: Path, rows: int, pairs: int, seed: int = 0) -> tuple[Path, Path]:
    """``(embeddings, pairs)`` folders under ``folder`` (made once; reused when present)."""
    embeddings, pairs_dir = folder / "embeddings", folder / "pairs"
    if (pairs_dir / "_manifest.json").exists():
        return embeddings, pairs_dir
    # Ids sort as their rows do (zero-padded), so that a < b as rows is id_a < id_b as strings.
    ids = pa.array([f"q{row:09d}" for row in range(rows)], pa.string())
    embeddings.mkdir(parents=True, exist_ok=True)
    vectors = np.random.default_rng(seed).standard_normal((rows, 4)).astype(np.float32)
    for i, part in enumerate(np.array_split(np.arange(rows), PARTS)):
        table = embeddings_table(
            ids.take(pa.array(part)).to_pylist(),
            vectors[part],
            np.full(len(part), 5, np.int32),
            np.zeros(len(part), bool),
        )
        write_parquet(str(embeddings / f"part-{i:05d}-of-{PARTS:05d}.parquet"), table, table.schema)
    embedding_manifest = {
        "kind": "embeddings",
        **MODEL,
        "keep_text": False,
        "input": {"pattern": "corpus/*", "id_field": "id", "text_field": "text"},
        "counts": {"read": rows, "embedded": rows, "rejected": 0},
    }
    (embeddings / "_manifest.json").write_text(json.dumps(embedding_manifest))
    _, planted = planted_pairs(rows, pairs, seed)
    (pairs_dir / "pairs").mkdir(parents=True, exist_ok=True)
    (pairs_dir / "neighbors").mkdir(exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(len(planted)), PARTS)):
        table = pairs_table(ids, planted.a[part], planted.b[part], planted.scores[part])
        write_parquet(part_path(str(pairs_dir), "pairs", i, PARTS), table, PAIRS_SCHEMA)
    manifest = {
        "kind": "pairs",
        **MODEL,
        "method": "exact",
        "k": 10,
        "threshold": PAIRS_THRESHOLD,
        "pairs": {"count": len(planted), "threshold": PAIRS_THRESHOLD},
        "counts": {"items": rows, "neighbor_rows": 0, "pairs": len(planted)},
        "embeddings": [{"directory": str(embeddings), "manifest": embedding_manifest}],
    }
    (pairs_dir / "_manifest.json").write_text(json.dumps(manifest))
    return embeddings, pairs_dir


def timed_dedup(code: Path, pairs_dir: Path, output: Path | None, args: list[str]) -> dict:
    """One ``sbert dedup`` in a child process importing the project from ``code``."""
    command = [
        sys.executable,
        "-c",
        "import sys; from sbert_pipeline.jobs.cli import main; sys.exit(main())",
    ]
    command += ["dedup", "--pairs", str(pairs_dir), *args]
    command += ["--dry-run"] if output is None else ["--output", str(output), "--overwrite"]
    env = {**os.environ, "PYTHONPATH": str(code.resolve())}
    log = (output or pairs_dir).parent / "dedup.log"
    start = time.perf_counter()
    with open(log, "w") as out:
        child = subprocess.Popen(command, cwd=code, env=env, stdout=out, stderr=subprocess.STDOUT)
        # wait4, not wait: the rusage of this child alone (RUSAGE_CHILDREN is a max over all).
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    text = log.read_text()
    if status:
        raise SystemExit(f"sbert dedup failed ({status}) with {code}: {text[-3000:]}")
    return {
        "code": str(code),
        "seconds": round(seconds, 2),
        # CPU time: the machine may be shared, and wall time then says more about the others.
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_bytes": usage.ru_maxrss * 1024,
        "output_tail": text.strip().splitlines()[-12:],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--pairs", type=int, default=10_000_000)
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/dedup_stage_scale"))
    parser.add_argument("--code", type=Path, action="append", default=[])
    parser.add_argument("--extra", default="", help="more sbert dedup flags, one string")
    parser.add_argument("--write", action="store_true", help="write the outputs (not --dry-run)")
    args = parser.parse_args(argv)
    folder = args.folder / f"{args.rows}_{args.pairs}"
    start = time.perf_counter()
    _, pairs_dir = write_folders(folder, args.rows, args.pairs)
    print(f"folders ready in {time.perf_counter() - start:.1f} s: {folder}", flush=True)
    runs = []
    for code in args.code or [ROOT]:
        flags = ["--threshold", str(args.threshold), *shlex.split(args.extra)]
        # A fresh output per run: a version left by the previous run would be compared with
        # (stable keep), which costs memory of its own.
        scratch = Path(tempfile.mkdtemp(prefix="dedup-", dir=folder))
        output = scratch / "out" if args.write else None
        try:
            runs.append(timed_dedup(code, pairs_dir, output, flags))
            if output is not None:
                manifest = json.loads((output / "_manifest.json").read_text())
                runs[-1]["memory"] = manifest.get("memory")  # the stage's own estimate
        finally:
            shutil.rmtree(scratch)
        print(json.dumps(runs[-1]), flush=True)
    path = write_result(
        "dedup_stage_scale",
        {"rows": args.rows, "pairs": args.pairs, "threshold": args.threshold, "runs": runs},
    )
    print(f"JSON: {path}")


if __name__ == "__main__":
    main()
