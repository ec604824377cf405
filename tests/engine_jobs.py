"""What the engine tests (Dask, Spark, Flink) share: a corpus of near-duplicates, a job config,
readers of a job's outputs for comparing a run on a cluster with the local runner's, and the
local cluster's record as ``local-cluster.sh up`` writes it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

_BASE = [
    "a man plays the guitar in the house",
    "the dog runs on the road in the rain",
    "why is the sky blue and the sun red",
    "a woman eats food with the cat",
    "how do i play music on the guitar",
    "the red car is on the green road",
]
# Pairs at or above this cosine are written, and dedup groups them (the tiny model's variants
# of one sentence are this close; different sentences are not).
THRESHOLD = 0.995


def corpus_rows(count: int = 60) -> list[dict]:
    """``count`` texts (ids ``s0, s1, ...``): the six sentences in turn, each time with words
    dropped, swapped or repeated, and (past 60) a number that makes each text its own."""
    rows = []
    for n in range(count):
        words = _BASE[n % len(_BASE)].split()
        j = n // len(_BASE)
        if j % 3 == 1:
            del words[j % len(words)]
        elif j % 3 == 2:
            k = j % (len(words) - 1)
            words[k], words[k + 1] = words[k + 1], words[k]
        words += ["the"] * (j % 10 // 3)
        if n >= 60:
            words.append(str(n))
        rows.append({"id": f"s{n}", "text": " ".join(words)})
    return rows


def write_corpus(path: Path, count: int = 60) -> Path:
    """The corpus of ``count`` rows as JSON lines at ``path``."""
    path.write_text("".join(json.dumps(row) + "\n" for row in corpus_rows(count)))
    return path


def write_job(
    path: Path,
    job_dir: Path,
    corpus: Path,
    model: Path,
    stages: tuple[str, ...] = ("embed", "pairs", "dedup"),
    **top,
) -> Path:
    """A job config of ``stages`` (pairs exact, dedup at :data:`THRESHOLD`); ``top`` adds or
    replaces top-level keys (``runner``, ``beam``, a stage's settings)."""
    config = {
        "job_dir": str(job_dir),
        "input": {"path": str(corpus), "id_field": "id"},
        "model": str(model),
        "stages": list(stages),
        "pairs": {"k": 5, "threshold": THRESHOLD, "method": "exact"},
        "dedup": {"threshold": THRESHOLD},
        **top,
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def manifest(folder: Path) -> dict:
    return json.loads((folder / "_manifest.json").read_text())


def embeddings(job_dir: Path) -> dict[str, np.ndarray]:
    """Id -> vector of the job's embeddings (the shards its manifest lists); no id twice."""
    folder = job_dir / "embeddings"
    table = pq.read_table([folder / shard for shard in manifest(folder)["shards"]])
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "an id was written twice"
    vectors = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
    return dict(zip(ids, vectors, strict=True))


def pairs(job_dir: Path) -> set[tuple[str, str]]:
    table = pq.read_table(sorted((job_dir / "pairs").glob("pairs/part-*.parquet")))
    return {
        tuple(sorted(pair))
        for pair in zip(
            table.column("id_a").to_pylist(), table.column("id_b").to_pylist(), strict=True
        )
    }


def groups(job_dir: Path) -> set[frozenset[str]]:
    table = pq.read_table(job_dir / "dedup" / "groups.parquet")
    members: dict[int, set[str]] = {}
    for group, item in zip(
        table.column("group").to_pylist(), table.column("id").to_pylist(), strict=True
    ):
        members.setdefault(group, set()).add(item)
    return {frozenset(ids) for ids in members.values()}


def record_cluster(home: Path, **settings: str) -> None:
    """Write a local cluster's record (``run/cluster.env``) as ``local-cluster.sh up`` does."""
    text = "".join(f"{key}={value}\n" for key, value in settings.items())
    (home / "run" / "cluster.env").write_text(text)
