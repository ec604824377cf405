"""What the finetune stage records about its data sets, for both model kinds: a data set's
manifest entry and the short names its test sets are reported under."""

from __future__ import annotations

from pathlib import Path

from sbert_core.model.artifact import sha256_of_files
from sbert_core.training.data import ExampleSet

# The model card's file name in a trained model's folder.
MODEL_CARD = "README.md"


def describe_data(examples: ExampleSet | None) -> dict | None:
    """A data set's manifest entry: its path, sha256, kind and example count (None: none)."""
    if examples is None:
        return None
    path = Path(examples.source)
    return {
        "path": str(path.resolve()),
        "sha256": sha256_of_files([path]),
        "kind": examples.kind,
        "examples": len(examples),
    }


def short_names(paths: list[str]) -> list[str]:
    """``folder/file`` names for test sets (``stsb/test.tsv.gz``, ``snli/test.tsv.gz``),
    numbered where they still collide."""
    names = []
    for path in paths:
        name = "/".join(Path(path).parts[-2:])
        names.append(name if name not in names else f"{name}#{len(names) + 1}")
    return names
