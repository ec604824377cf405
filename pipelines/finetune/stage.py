"""``sbert finetune``: fine-tune a Sentence-BERT model and save it for the pipeline.

Under torchrun every process trains its share of each batch (gloo on CPU, NCCL on GPUs) and the
first one evaluates, saves and reports. The config (YAML or JSON) has the sections of
:class:`FinetuneConfig`; ``key=value`` arguments and the flags override it
(``training.learning_rate=3e-5``, ``test.0.path=...``). Relative paths are relative to the
working directory. All data is read and checked before the model is
loaded. Checkpoints go to ``OUTPUT.checkpoints/`` (a killed run started again with the same
command resumes from the newest one) and are deleted once the model is saved.
``--print-config`` prints the resolved config as YAML and trains nothing.

The output is a sentence-transformers directory (``sbert embed --model OUTPUT`` and
``SentenceTransformer(OUTPUT)`` load it) with ``sbert_manifest.json`` (base model, data sha256s,
config, dev and test metrics before and after, software versions) and a model card README.md.
With a ``dedup_test`` section (labelled duplicates, ``examples/finetune_qqp.yaml``), the card and
manifest also hold dedup pair-F1 on the held-out part before and after
(:mod:`sbert_pipeline.finetune.holdout_grouping`).

``kind: cross_encoder`` with ``objective: {name: binary_cross_entropy}`` trains a cross-encoder
instead (:mod:`sbert_pipeline.finetune.cross_encoder_run`, ``examples/cross_encoder_qqp.yaml``): a
new one-label head on the model's encoder (or a cross-encoder trained further), binary cross-entropy
on labelled pairs (``duplicate_pairs``, two-label ``labelled_pairs`` or ``scored_pairs``, targets
in [0, 1]), AP and best F1 of each ``test`` set in the manifest and card, saved as a
sentence-transformers CrossEncoder folder. One process (no torchrun); no ``dedup_test``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from sbert_pipeline.finetune.config import FinetuneConfig, resolve_config
from sbert_pipeline.finetune.data_records import (
    MODEL_CARD,
    describe_data,
    short_names,
    training_manifest,
    training_summary,
    warn_single_target,
)
from sbert_pipeline.finetune.finetune_summary import FinetuneSummary, PrintedConfig
from sbert_pipeline.finetune.holdout_grouping import dedup_metrics, evaluate_dedup, load_holdout
from sbert_pipeline.finetune.model_card import model_card
from sbert_pipeline.finetune.options import Options
from sbert_pipeline.finetune.progress import StepBar, show_training_progress
from sbert_pipeline.io.text_normal import text_key
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.stops import JobFailedError

from sbert_core.config import config_to_dict
from sbert_core.evaluation.evaluators import build_evaluator
from sbert_core.model.artifact import MANIFEST_FILE
from sbert_core.training.checkpoint import seed_everything
from sbert_core.training.data import load_examples
from sbert_core.training.loop import TrainingDivergedError, load_base_encoder, train
from sbert_core.training.losses import SoftmaxLoss, build_loss, check_data_kind

# Training runs for minutes to hours: its step, loss and dev lines are shown unless the user
# has set that logger's level.
TRAINING_LOGGER = "sbert_core.training.loop"

CLASSIFIER_FILE = "softmax_classifier.safetensors"


def run(options: Options, *, pipeline: Any = None) -> Result:
    """Fine-tune as the options say and save the model.

    With ``options.print_config`` nothing is trained or written: the summary is a
    :class:`PrintedConfig`, whose ``line()`` is the resolved config as YAML, and the manifest
    is empty. Under torchrun, a process other than the first returns an empty manifest and a
    summary whose ``line()`` is empty (the first one reports).

    Args:
        options: the stage's options.
        pipeline: unused (fine-tuning runs no Beam pipeline); accepted so that every stage's
            ``run`` has the same signature.

    Raises:
        ValueError / DataFileError / ModelLoadError / FileExistsError: bad config, data, model
            or an existing output, all before training starts.
        JobFailedError: the loss diverged (the last checkpoint is kept).
    """
    progress = logging.getLogger(TRAINING_LOGGER)
    if progress.level == logging.NOTSET:
        progress.setLevel(logging.INFO)
    config = resolve_config(options)
    if options.print_config:
        import yaml

        resolved = config_to_dict(config)
        printed = PrintedConfig(resolved, yaml.safe_dump(resolved, sort_keys=False))
        return Result(output=config.output, manifest={}, summary=printed)
    show_training_progress()
    summary = _finetune(config)
    output = Path(config.output)
    manifest = (
        json.loads((output / MANIFEST_FILE).read_text(encoding="utf-8"))
        if summary.main_process
        else {}
    )
    return Result(output=str(output), manifest=manifest, summary=summary)


def _finetune(config: FinetuneConfig) -> FinetuneSummary:
    """Read and check the data, load the model, train, evaluate and save (the first process)."""
    output = Path(config.output)
    if output.exists() and any(output.iterdir()) and not config.overwrite:
        raise FileExistsError(f"{output} exists and is not empty; pass --overwrite to replace it")

    if config.kind == "cross_encoder":
        from sbert_pipeline.finetune.cross_encoder_run import finetune_cross_encoder

        return finetune_cross_encoder(config)
    check_data_kind(config.objective.name, config.train.example_kind, config.train.path)
    # Copies of a text are the texts dedup treats as one (NFKC, casefold, punctuation).
    train_examples = load_examples(config.train, text_key)
    warn_single_target(train_examples, config.objective.name)
    dev_examples = load_examples(config.dev, text_key) if config.dev is not None else None
    test_examples = [load_examples(spec, text_key) for spec in config.test]
    holdout = None
    if config.dedup_test is not None:
        config.dedup_test.check(config.train)
        holdout = load_holdout(config.dedup_test, text_key)

    encoder = load_base_encoder(config.model, config.training, allow_pickle=config.allow_pickle)
    base = encoder.describe()
    seed_everything(config.training.seed)  # the softmax head starts the same on every process
    loss = build_loss(config.objective, encoder, num_labels=len(train_examples.label_names))
    # Built up front, so that a test set the objective cannot score fails before training.
    dev_evaluator = build_evaluator(dev_examples, loss) if dev_examples is not None else None
    names = short_names([examples.source for examples in test_examples])
    test_evaluators = [
        build_evaluator(examples, loss, name)
        for examples, name in zip(test_examples, names, strict=True)
    ]
    is_main = int(os.environ.get("RANK", "0")) == 0

    before, dedup_before = {}, {}
    if config.evaluate_base_model and is_main:
        before = {evaluator.name: evaluator(encoder) for evaluator in test_evaluators}
        if holdout is not None:
            dedup_before = evaluate_dedup(encoder, holdout, config.dedup_test, base=True)
    steps = StepBar()
    try:
        result = train(
            loss, train_examples, config.training, evaluator=dev_evaluator, callbacks=[steps]
        )
    except TrainingDivergedError as err:
        raise JobFailedError(str(err)) from err
    finally:
        steps.close()

    after = {evaluator.name: evaluator(encoder) for evaluator in test_evaluators} if is_main else {}
    test_metrics = {
        evaluator.name: {
            "metric": evaluator.primary_metric,
            "before": before.get(evaluator.name, {}).get(evaluator.primary_metric),
            "after": after.get(evaluator.name, {}).get(evaluator.primary_metric),
        }
        for evaluator in test_evaluators
    }
    if is_main:
        data = {
            "train": describe_data(train_examples),
            "dev": describe_data(dev_examples),
            "test": [describe_data(examples) for examples in test_examples],
        }
        manifest = training_manifest(config, base, data, result, before, after)
        if holdout is not None:
            dedup_after = evaluate_dedup(encoder, holdout, config.dedup_test)
            manifest["metrics"]["dedup"] = dedup_metrics(
                config.dedup_test, holdout, dedup_before, dedup_after
            )
            test_metrics.update(
                {
                    f"dedup {method}": {
                        "metric": "pair_f1",
                        "before": dedup_before.get("methods", {}).get(method, {}).get("f1"),
                        "after": point["f1"],
                    }
                    for method, point in dedup_after["methods"].items()
                }
            )
        _save(encoder, loss, output, manifest, config.overwrite)
        if config.remove_checkpoints:
            shutil.rmtree(config.training.checkpoint_dir, ignore_errors=True)
    return training_summary(output, result, test_metrics, main_process=is_main)


def _save(encoder, loss, output: Path, manifest: dict, overwrite: bool) -> None:
    """Write the model, the softmax head (if any) and the model card; the output directory
    appears whole or not at all."""
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        model_dir = encoder.save(staging / "model", extra_manifest=manifest)
        if isinstance(loss, SoftmaxLoss):
            from safetensors.torch import save_file

            save_file(
                {k: v.detach().cpu().contiguous() for k, v in loss.classifier.state_dict().items()},
                model_dir / CLASSIFIER_FILE,
            )
        (model_dir / MODEL_CARD).write_text(model_card(manifest), encoding="utf-8")
        if output.exists():
            if not overwrite and any(output.iterdir()):
                raise FileExistsError(f"{output} appeared while training; not replacing it")
            shutil.rmtree(output)
        model_dir.rename(output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
