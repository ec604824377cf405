"""sbert_core.evaluation sits below sbert_core.training: training scores its dev sets with the
evaluators, and evaluation never imports training (no package cycle).

Read with ``ast`` as tests/test_layering.py does: every import statement counts, at module
level, inside functions and under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

from sbert_core.evaluation.evaluators import PairClassifier, build_evaluator
from sbert_core.training.data import ExampleSet
from sbert_core.training.losses import CosineSimilarityLoss, SoftmaxLoss

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path: Path) -> list[str]:
    """Every module an import statement in ``path`` names (``from a import b`` gives a, a.b)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
    return found


def test_evaluation_imports_nothing_of_training():
    modules = sorted((ROOT / "sbert_core" / "evaluation").rglob("*.py"))
    assert len(modules) >= 2
    wrong = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in modules
        for module in _imported_modules(path)
        if module == "sbert_core.training" or module.startswith("sbert_core.training.")
    ]
    assert wrong == []


class _TinyEncoder(torch.nn.Module):
    """Just what the losses read of an encoder when they are built."""

    full_dim = 4


def test_evaluators_tell_the_softmax_loss_by_its_classifier_head():
    encoder = _TinyEncoder()
    assert isinstance(SoftmaxLoss(encoder, num_labels=3), PairClassifier)
    assert not isinstance(CosineSimilarityLoss(encoder), PairClassifier)
    labelled = ExampleSet(
        "labelled_pairs", (("a", "b"), ("c", "d")), np.array([0, 1]), source="dev.tsv"
    )
    evaluator = build_evaluator(labelled, SoftmaxLoss(encoder, num_labels=2))
    assert type(evaluator).__name__ == "SoftmaxClassificationEvaluator"
    with pytest.raises(ValueError, match="only the softmax loss trains"):
        build_evaluator(labelled, CosineSimilarityLoss(encoder))
