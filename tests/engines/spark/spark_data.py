"""The data of the Spark cluster tests: a small corpus of near-duplicates and the job config
that runs embed, pairs and dedup."""

from __future__ import annotations

import json
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
# Pairs at or above this cosine are written, and dedup groups them (the tiny model's variants
# of one sentence are this close; different sentences are not).
THRESHOLD = 0.995


def corpus_rows(count: int = 60) -> list[dict]:
    """``count`` texts: the six sentences in turn, each time with words dropped, swapped or
    repeated, and (past 60) a number that makes each text its own."""
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


def write_job(path: Path, job_dir: Path, corpus: Path, model: Path, **top) -> Path:
    """A job config of the stages embed, pairs (exact) and dedup; ``top`` adds job-wide keys
    (``runner``, ``beam``)."""
    config = {
        "job_dir": str(job_dir),
        "input": {"path": str(corpus), "id_field": "id"},
        "model": str(model),
        "stages": ["embed", "pairs", "dedup"],
        "pairs": {"k": 5, "threshold": THRESHOLD, "method": "exact"},
        "dedup": {"threshold": THRESHOLD},
        **top,
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path
