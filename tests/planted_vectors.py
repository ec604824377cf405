"""Planted vector data for index tests: clustered unit vectors and embeddings directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from sbert_pipeline.io.schemas import embeddings_table

PLANTED_MODEL = {
    "model_id": "planted-gaussians",
    "weights_sha256": "0" * 64,
    "pooling": "mean",
    "normalized": True,
    "max_seq_length": 128,
}


def clustered_vectors(
    n: int, dim: int, *, clusters: int = 100, spread: float = 0.6, seed: int = 0, draw: int = 0
) -> np.ndarray:
    """``n`` unit vectors around ``clusters`` random centres (Gaussian noise of ``spread``).

    ``seed`` fixes the centres and ``draw`` the points, so ``draw=1`` gives fresh queries from
    the same distribution as a ``draw=0`` corpus.
    """
    centres = np.random.default_rng(seed).standard_normal((clusters, dim)).astype(np.float32)
    rng = np.random.default_rng([seed, draw + 1])
    labels = rng.integers(0, clusters, n)
    noise = rng.standard_normal((n, dim)).astype(np.float32)
    vectors = centres[labels] + spread * noise
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def write_embeddings_dir(
    directory: Path,
    vectors: np.ndarray,
    *,
    n_shards: int = 1,
    texts: list[str] | None = None,
    row_group_size: int = 1000,
    ids: list[str] | None = None,
    **manifest_fields,
) -> Path:
    """An embed-job-shaped output (Parquet shards + manifest) holding ``vectors``.

    Ids are ``ids`` or ``v{row}``; small row groups let range reads skip whole groups;
    ``manifest_fields`` override the manifest (e.g. ``normalized=False``).
    """
    directory.mkdir(parents=True)
    n, dim = vectors.shape
    bounds = np.linspace(0, n, n_shards + 1).astype(int)
    names = []
    for shard in range(n_shards):
        lo, hi = bounds[shard], bounds[shard + 1]
        table = embeddings_table(
            [f"v{i}" for i in range(lo, hi)] if ids is None else list(ids[lo:hi]),
            vectors[lo:hi],
            np.zeros(hi - lo, np.int32),
            np.zeros(hi - lo, bool),
            texts=None if texts is None else texts[lo:hi],
        )
        name = f"part-{shard:05d}-of-{n_shards:05d}.parquet"
        pq.write_table(table, directory / name, row_group_size=row_group_size)
        names.append(name)
    manifest = {
        "kind": "embeddings",
        **PLANTED_MODEL,
        "dim": dim,
        "dtype": "float32",
        "counts": {"read": n, "embedded": n, "rejected": 0},
        "keep_text": texts is not None,
        "shards": names,
        **manifest_fields,
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    return directory


def exact_top_k(corpus: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest inner products per query, best first (numpy only)."""
    scores = queries @ corpus.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean overlap of found and true top-k lists, divided by k."""
    k = truth.shape[1]
    hits = sum(len(set(f[:k]).intersection(t)) for f, t in zip(found, truth, strict=True))
    return hits / (len(truth) * k)


def write_embeddings(directory: Path, ids, vectors, *, shards: int = 2, **manifest_fields) -> Path:
    """:func:`write_embeddings_dir` with given ids and model ``planted`` (max length 48)."""
    fields = {"model_id": "planted", "max_seq_length": 48, **manifest_fields}
    return write_embeddings_dir(directory, vectors, n_shards=shards, ids=list(ids), **fields)


def write_embeddings_version(
    directory: Path, parts: dict[str, tuple[list[str], np.ndarray]], **manifest_fields
) -> Path:
    """Publish one version of an embeddings folder whose manifest lists each part's digest,
    as an incremental embed does: ``parts`` maps part names (``part-<x>.parquet``) to
    ``(ids, vectors)``.

    A part already in the folder is kept as it is (same bytes, same digest), so calling this
    again with some of the same parts and some new ones gives the next version of the folder
    (pipelines/io/embeddings_versions.py); parts of the folder not in ``parts`` are deleted.
    """
    import hashlib

    directory.mkdir(parents=True, exist_ok=True)
    files = []
    total, dim = 0, None
    for name, (ids, vectors) in parts.items():
        path = directory / name
        if not path.exists():
            table = embeddings_table(
                list(ids), vectors, np.zeros(len(ids), np.int32), np.zeros(len(ids), bool)
            )
            pq.write_table(table, path)
        data = path.read_bytes()
        rows = pq.ParquetFile(path).metadata.num_rows
        files.append(
            {
                "path": name,
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "rows": rows,
            }
        )
        total += rows
        dim = vectors.shape[1]
    for stale in directory.glob("part-*.parquet"):
        if stale.name not in parts:
            stale.unlink()
    manifest = {
        "kind": "embeddings",
        **PLANTED_MODEL,
        "model_id": "planted",
        "max_seq_length": 48,
        "dim": dim,
        "dtype": "float32",
        "counts": {"read": total, "embedded": total, "rejected": 0},
        "keep_text": False,
        "shards": sorted(parts),
        "commit": {"run_id": "0" * 12, "datasets": [""], "files": files},
        **manifest_fields,
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    return directory
