"""Shared helpers of the output-folder reliability tests (issue 13, items 1-4)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from testdata import DATA_DIR, read_tsv

CORPUS_TEXTS = 40  # rows of the shared corpus fixture (tests/reliability/conftest.py)


def texts(n: int, *, offset: int = 0) -> list[str]:
    """``n`` distinct short English texts from the bundled test corpus."""
    rows = read_tsv(DATA_DIR / "corpus" / "short_texts_en.tsv.gz")
    return [row["text"] for row in rows[offset : offset + n]]


def write_txt(directory: Path, lines: list[str], name: str = "corpus") -> Path:
    """One ``.txt`` corpus file (one text per line)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def embed_argv(corpus: Path, out: Path, model: Path, *extra: str) -> list[str]:
    """``sbert embed`` options for a corpus file, an output folder and a model."""
    return ["--input", str(corpus), "--output", str(out), "--model", str(model), *extra]


def snapshot(directory: Path) -> dict[str, str]:
    """Every file below ``directory``: its relative path and sha256 (detects any change)."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def start_cli(args: list[str], log: Path) -> subprocess.Popen:
    """``python -m sbert_pipeline.jobs.cli ARGS`` in its own process group (so SIGKILL reaches
    its workers)."""
    with open(log, "w") as stream:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "sbert_pipeline.jobs.cli", *args],
            stdout=stream,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
