"""The data of the Dask engine tests: a small corpus of near-duplicates and the job config
that runs every Beam stage."""

from __future__ import annotations

from pathlib import Path

import yaml

_BASE = [
    "a man plays the guitar in the house",
    "the dog runs on the road in the rain",
    "why is the sky blue and the sun red",
    "a woman eats food with the cat",
    "how do i play music on the guitar",
    "the red car is on the green road",
]


def corpus_rows() -> list[dict]:
    """120 texts: six sentences, each with variants that drop, swap or repeat words."""
    rows = []
    for i, text in enumerate(_BASE):
        words = text.split()
        for j in range(20):
            variant = list(words)
            if j % 3 == 1:
                del variant[j % len(variant)]
            elif j % 3 == 2:
                k = j % (len(variant) - 1)
                variant[k], variant[k + 1] = variant[k + 1], variant[k]
            variant += ["the"] * (j // 3)
            rows.append({"id": f"d{i}-{j}", "text": " ".join(variant)})
    return rows


def write_job(
    path: Path, job_dir: Path, corpus: Path, model: Path, cross_encoder: Path, **top
) -> Path:
    """A job config: every Beam stage (embed, the sharded index fill, the cluster assignment,
    pairs, verify) and dedup; ``top`` adds job-wide keys (``runner``, ``beam``)."""
    config = {
        "job_dir": str(job_dir),
        "input": {"path": str(corpus), "id_field": "id"},
        "model": str(model),
        "stages": ["embed", "index", "cluster", "pairs", "verify", "dedup"],
        "index": {"factory": "Flat", "shards": 2},
        "cluster": {"method": "kmeans", "k": 6},
        "pairs": {"k": 5, "threshold": 0.995, "method": "exact"},
        "verify": {"model": str(cross_encoder)},
        "dedup": {"threshold": 0.5},
        **top,
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path
