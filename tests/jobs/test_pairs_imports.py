"""What ``sbert pairs --method exact`` loads on a local run.

A local exact run whose whole-matrix search fits the worker memory searches in the launcher
itself, so it needs neither Beam (about a second and a half to import) nor a pipeline; a run
that needs a pipeline (query ranges, Beam options given) still builds one on Beam's local runner.
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from planted import unit_rows
from planted_vectors import write_embeddings_dir
from sbert_pipeline.pairs.plan import exact_worker_bytes, whole_matrix_bytes

ROOT = Path(__file__).resolve().parents[2]
N, DIM, K = 300, 8, 5


def _embeddings(tmp_path: Path) -> Path:
    vectors = unit_rows(np.random.default_rng(7).standard_normal((N, DIM))).astype(np.float32)
    write_embeddings_dir(tmp_path / "emb", vectors, n_shards=2, row_group_size=64)
    return tmp_path / "emb"


def _sbert_pairs(*args: str) -> tuple[int, list[str]]:
    """Run ``sbert pairs ARGS`` in a fresh interpreter: its exit status and the top-level
    packages of Beam and torch it had loaded at the end."""
    code = (
        "import sys\n"
        "from sbert_pipeline.jobs.cli import main\n"
        f"status = main(['pairs', *{list(args)!r}])\n"
        "print(status, sorted({m.split('.')[0] for m in sys.modules} & {'apache_beam', 'torch'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    status, loaded = done.stdout.strip().splitlines()[-1].split(" ", 1)
    return int(status), ast.literal_eval(loaded)


def test_a_local_exact_run_searches_in_the_launcher_without_beam(tmp_path):
    out = tmp_path / "pairs"
    status, loaded = _sbert_pairs(
        "--embeddings", str(_embeddings(tmp_path)), "--output", str(out), "--method", "exact",
        "--k", str(K), "--threshold", "0.5",
    )  # fmt: skip
    manifest = json.loads((out / "_manifest.json").read_text())
    assert status == 0 and manifest["runner"] == "in-process"
    assert manifest["exact"]["path"] == "whole" and manifest["counts"]["neighbor_rows"] == N
    # torch runs the kernel's matrix products; Beam is never needed.
    assert loaded == ["torch"]


def test_query_ranges_still_run_a_beam_pipeline_on_the_local_runner(tmp_path):
    # A budget the range search fits and the whole-matrix search does not.
    budget = exact_worker_bytes(N, DIM)
    assert budget < whole_matrix_bytes(N, DIM, K, False)
    out = tmp_path / "pairs"
    status, loaded = _sbert_pairs(
        "--embeddings", str(_embeddings(tmp_path)), "--output", str(out), "--method", "exact",
        "--k", str(K), "--worker-memory", str(budget),
    )  # fmt: skip
    manifest = json.loads((out / "_manifest.json").read_text())
    assert status == 0 and manifest["runner"] == "FnApiRunner"
    assert manifest["exact"]["path"] == "ranges" and manifest["counts"]["neighbor_rows"] == N
    assert "apache_beam" in loaded


def test_beam_options_of_the_local_runner_keep_the_search_in_the_launcher(tmp_path):
    out = tmp_path / "pairs"
    status, _ = _sbert_pairs(
        "--embeddings", str(_embeddings(tmp_path)), "--output", str(out), "--method", "exact",
        "--direct_num_workers", "1",
    )  # fmt: skip
    manifest = json.loads((out / "_manifest.json").read_text())
    assert status == 0 and manifest["runner"] == "in-process"


def test_the_objects_left_at_exit_are_frozen_for_the_collector():
    # An exit handler registered before sbert's main runs after main's own (they run last
    # first): by then the collector's objects are frozen, so the interpreter's last
    # collections skip them.
    code = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "from sbert_pipeline.jobs.cli import main\n"
        "main(['pairs', '--help'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "frozen True"
