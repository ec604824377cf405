"""What the finetune stage records about a run, for both model kinds: the training fields of
the model's manifest, a data set's entry in it, the short names its test sets are reported
under, and the run's summary."""

from __future__ import annotations

import logging
import platform
from pathlib import Path

from sbert_pipeline.finetune.config import FinetuneConfig
from sbert_pipeline.finetune.finetune_summary import FinetuneSummary
from sbert_pipeline.io.manifest_fields import software_versions

from sbert_core.config import config_to_dict
from sbert_core.model.artifact import sha256_of_files
from sbert_core.training.data import ExampleSet, single_target
from sbert_core.training.step_loop import TrainingResult

logger = logging.getLogger(__name__)

# The model card's file name in a trained model's folder.
MODEL_CARD = "README.md"


def warn_single_target(examples: ExampleSet, objective: str) -> None:
    """Log a warning when every training example has the same label or target: the objective
    then has nothing to tell apart, and the model it trains is close to useless."""
    target = single_target(examples)
    if target is not None:
        logger.warning(
            "%s: every training example has %s, so the %s objective has only one class to "
            "learn from: expect a model that scores every pair alike (the manifest and model "
            "card record this); add examples with other labels",
            examples.source,
            target,
            objective,
        )


def describe_data(examples: ExampleSet | None) -> dict | None:
    """A data set's manifest entry: its path, sha256, kind and example count (None: none),
    and ``single_target`` when every example has the same label or target."""
    if examples is None:
        return None
    path = Path(examples.source)
    entry = {
        "path": str(path.resolve()),
        "sha256": sha256_of_files([path]),
        "kind": examples.kind,
        "examples": len(examples),
    }
    target = single_target(examples)
    if target is not None:
        entry["single_target"] = target
    return entry


def short_names(paths: list[str]) -> list[str]:
    """``folder/file`` names for test sets (``stsb/test.tsv.gz``, ``snli/test.tsv.gz``),
    numbered where they still collide."""
    names = []
    for path in paths:
        name = "/".join(Path(path).parts[-2:])
        names.append(name if name not in names else f"{name}#{len(names) + 1}")
    return names


def training_manifest(
    config: FinetuneConfig,
    base: dict,
    training_data: dict,
    result: TrainingResult,
    before: dict,
    after: dict,
) -> dict:
    """The training fields of a fine-tuned model's manifest (the model's own fields come from
    its ``save``).

    Args:
        config: the resolved finetune config, recorded whole.
        base: the start model's description (``describe()``).
        training_data: the ``train``/``dev``/``test`` entries (see :func:`describe_data`).
        result: what training reported.
        before, after: test-set metrics of the start and the trained model, by test name.
    """
    # Imported here: the versions are read only when a model is written.
    import numpy
    import torch
    import transformers

    return {
        "model_id": str(Path(config.output).resolve()),
        "base_model": base,
        "objective": config_to_dict(config.objective),
        "training_data": training_data,
        "config": config_to_dict(config),
        "training": {
            "steps": result.steps,
            "total_steps": result.total_steps,
            "seconds": round(result.seconds, 3),
            "examples_per_second": round(result.examples_per_second, 2),
            "world_size": result.world_size,
            "precision": result.precision,
            "resumed_from": result.resumed_from,
            "loss_history": result.loss_history,
        },
        "metrics": {
            "dev": {
                "primary_metric": result.primary_metric,
                "best_step": result.best_step,
                "best_score": result.best_score,
                "history": result.dev_history,
            },
            "test": {"before": before, "after": after},
        },
        "software": software_versions(
            beam=False,
            torch=torch.__version__,
            transformers=transformers.__version__,
            numpy=numpy.__version__,
            python=platform.python_version(),
        ),
    }


def training_summary(
    output: Path, result: TrainingResult, test_metrics: dict, *, main_process: bool = True
) -> FinetuneSummary:
    """The run's summary from what training reported and the test metrics (``{name: {metric,
    before, after}}``); a process other than the first reports no test metrics."""
    return FinetuneSummary(
        output=str(output),
        steps=result.steps,
        seconds=result.seconds,
        examples_per_second=result.examples_per_second,
        dev_metric=result.primary_metric,
        dev_score=result.best_score,
        test_metrics=test_metrics if main_process else {},
        resumed_from=result.resumed_from,
        main_process=main_process,
    )
