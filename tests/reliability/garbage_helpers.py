"""Small helpers shared by the garbage-model, garbage-vector and deterministic-failure tests."""

from __future__ import annotations

from pathlib import Path

from testdata import DATA_DIR, read_tsv


def texts(n: int) -> list[str]:
    """``n`` distinct short English texts from the bundled test corpus."""
    rows = read_tsv(DATA_DIR / "corpus" / "short_texts_en.tsv.gz")
    return [row["text"] for row in rows[:n]]


def write_txt(directory: Path, lines: list[str]) -> Path:
    """One ``corpus.txt`` (one text per line) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "corpus.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def embed_argv(corpus: Path, out: Path, model: Path, *extra: str) -> list[str]:
    """``sbert embed`` options for a corpus file, an output folder and a model."""
    return ["--input", str(corpus), "--output", str(out), "--model", str(model), *extra]
