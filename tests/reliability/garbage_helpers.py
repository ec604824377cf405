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


def clustered_vectors(n: int, dim: int, clusters: int, seed: int = 0):
    """``n`` unit vectors around ``clusters`` random centres."""
    import numpy as np

    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, clusters, n)] + 0.3 * rng.standard_normal((n, dim))
    vectors = vectors.astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def write_embeddings(directory: Path, vectors, *, shards: int = 2) -> Path:
    """An embeddings folder as an older embed job wrote it (no file listing), ids ``v{row}``.

    Writing the shards directly is the only way to get NaN rows past today's embed stage.
    """
    import json

    import numpy as np
    import pyarrow.parquet as pq
    from sbert_pipeline.io.schemas import embeddings_table

    directory.mkdir(parents=True)
    n, dim = vectors.shape
    bounds = np.linspace(0, n, shards + 1).astype(int)
    names = []
    for shard in range(shards):
        lo, hi = bounds[shard], bounds[shard + 1]
        table = embeddings_table(
            [f"v{i}" for i in range(lo, hi)],
            vectors[lo:hi],
            np.zeros(hi - lo, np.int32),
            np.zeros(hi - lo, bool),
        )
        names.append(f"part-{shard:05d}-of-{shards:05d}.parquet")
        pq.write_table(table, directory / names[-1], row_group_size=500)
    manifest = {
        "kind": "embeddings",
        "model_id": "planted",
        "weights_sha256": "0" * 64,
        "dim": dim,
        "pooling": "mean",
        "normalized": True,
        "max_seq_length": 128,
        "dtype": "float32",
        "counts": {"read": n, "embedded": n, "rejected": 0},
        "keep_text": False,
        "shards": names,
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    return directory
