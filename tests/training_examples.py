"""Generated training data with a planted answer, in the tiny test vocabulary.

Sentences are drawn from three topics that share no content words, so a model that learns
anything puts same-topic sentences together: pairs from one topic score 5 and are entailments,
pairs across topics score 0 and are contradictions, and triplets take their negative from
another topic.
"""

from __future__ import annotations

import random
from pathlib import Path

TOPICS = (
    ("man", "woman", "plays", "playing", "guitar", "music"),
    ("dog", "cat", "runs", "running", "road", "rain"),
    ("car", "house", "tree", "sky", "sun", "green"),
)
_GLUE = ("the", "a", "is", "with", "and", "in", "on")


def sentence(rng: random.Random, topic: int) -> str:
    """A short sentence of four topic words and some glue words."""
    words = [rng.choice(TOPICS[topic]) for _ in range(4)] + [rng.choice(_GLUE) for _ in range(2)]
    rng.shuffle(words)
    return " ".join(words)


def scored_pairs(n: int, seed: int = 0) -> list[tuple[str, str, float]]:
    """(sentence1, sentence2, score in [0, 5]): same topic 4-5, different topics 0-1."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        first = rng.randrange(3)
        same = rng.random() < 0.5
        second = first if same else (first + rng.randrange(1, 3)) % 3
        score = rng.uniform(4, 5) if same else rng.uniform(0, 1)
        rows.append((sentence(rng, first), sentence(rng, second), round(score, 3)))
    return rows


def labelled_pairs(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(sentence1, sentence2, label): same topic entailment, other topic contradiction."""
    return [
        (a, b, "entailment" if score >= 4 else "contradiction")
        for a, b, score in scored_pairs(n, seed)
    ]


def triplets(n: int, seed: int = 0) -> list[tuple[str, str, str]]:
    """(anchor, positive from its topic, negative from another topic)."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        topic = rng.randrange(3)
        other = (topic + rng.randrange(1, 3)) % 3
        rows.append((sentence(rng, topic), sentence(rng, topic), sentence(rng, other)))
    return rows


def write_tsv(path: Path, header: tuple[str, ...], rows) -> Path:
    """Write rows as a TSV with a header line (no quoting, as in the shared data)."""
    lines = ["\t".join(header)] + ["\t".join(str(value) for value in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def build_trainable_model(directory: Path, *, dropout: bool = True) -> Path:
    """A tiny random sentence-transformers model over the test vocabulary.

    Without ``dropout``, runs that split batches differently (processes, accumulation) are
    comparable step for step.
    """
    import json

    from testdata import build_st_dir, build_tiny_bert

    hf_dir = build_tiny_bert(directory / "hf")
    if not dropout:
        config_file = hf_dir / "config.json"
        config = json.loads(config_file.read_text())
        config["hidden_dropout_prob"] = 0.0
        config["attention_probs_dropout_prob"] = 0.0
        config_file.write_text(json.dumps(config, indent=2))
    return build_st_dir(hf_dir, directory / "st")
