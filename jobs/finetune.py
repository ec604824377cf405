"""``sbert finetune``: fine-tune a Sentence-BERT model and save it for the pipeline.

    sbert finetune --config examples/finetune_stsb.yaml [training.epochs=1 output=runs/x ...]
    sbert finetune --model all-MiniLM-L6-v2 --output runs/nli objective.name=softmax \\
        train.path=../shared/data/snli/dev.tsv.gz train.kind=labelled_pairs
    torchrun --standalone --nproc_per_node 2 -m jobs.finetune --config train.yaml   # DDP

Under torchrun every process trains its share of each batch (gloo on CPU, NCCL on GPUs) and the
first one evaluates and saves. The config (YAML or JSON) has the sections of
:class:`FinetuneConfig`; ``key=value`` arguments and the flags override it
(``training.learning_rate=3e-5``, ``test.0.path=...``). Relative paths are relative to the
working directory. All data is read and checked before the model is
loaded. Checkpoints go to ``OUTPUT.checkpoints/`` (a killed run started again with the same
command resumes from the newest one) and are deleted once the model is saved.

The output is a sentence-transformers directory (``sbert embed --model OUTPUT`` and
``SentenceTransformer(OUTPUT)`` load it) with ``sbert_manifest.json`` (base model, data sha256s,
config, dev and test metrics before and after, software versions) and a model card README.md.
With a ``dedup_test`` section (labelled duplicates, ``examples/finetune_qqp.yaml``), the card and
manifest also hold dedup pair-F1 on the held-out part before and after
(:mod:`jobs.finetune_dedup`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from jobs.finetune_dedup import (
    DedupTestConfig,
    card_lines,
    dedup_metrics,
    evaluate_dedup,
    load_holdout,
)
from jobs.parsers.finetune import build_parser
from pipelines.io.manifest_fields import software_versions
from pipelines.io.text_normal import text_key
from sbert_core import DEFAULT_MODEL
from sbert_core.artifact import sha256_of_files
from sbert_core.config import config_to_dict, load_config
from sbert_core.evaluation import build_evaluator
from sbert_core.losses import LossConfig, SoftmaxLoss, build_loss, check_data_kind
from sbert_core.training import TrainingDivergedError, TrainingResult, load_base_encoder, train
from sbert_core.training_checkpoint import seed_everything
from sbert_core.training_config import TrainingConfig
from sbert_core.training_data import DataSpec, ExampleSet, load_examples

# Training runs for minutes to hours: its step, loss and dev lines are shown unless the user
# has set that logger's level.
TRAINING_LOGGER = "sbert_core.training"

CLASSIFIER_FILE = "softmax_classifier.safetensors"
MODEL_CARD = "README.md"


@dataclass
class FinetuneConfig:
    """Everything a fine-tuning run needs; each section is a YAML mapping."""

    # The base model: a sentence-transformers or Hugging Face directory, or the bundled default.
    model: str = DEFAULT_MODEL
    output: str = ""
    overwrite: bool = False
    allow_pickle: bool = False
    objective: LossConfig = field(default_factory=LossConfig)
    train: DataSpec = field(default_factory=DataSpec)
    # Picks the best weights during training (see training.evaluate_every / keep_best).
    dev: DataSpec | None = None
    # Scored after training, and before it as well when evaluate_base_model is on.
    test: list[DataSpec] = field(default_factory=list)
    # Dedup pair-F1 on the holdout part of labelled duplicates (jobs/finetune_dedup.py), before
    # (with evaluate_base_model) and after training; into the manifest and the model card.
    dedup_test: DedupTestConfig | None = None
    evaluate_base_model: bool = True
    # Delete OUTPUT.checkpoints/ once the model is saved.
    remove_checkpoints: bool = True
    training: TrainingConfig = field(default_factory=TrainingConfig)


@dataclass(frozen=True)
class FinetuneSummary:
    """What a finished fine-tuning run reports."""

    output: str
    steps: int
    seconds: float
    examples_per_second: float
    dev_metric: str | None
    dev_score: float | None
    test_metrics: dict
    resumed_from: int | None

    def line(self) -> str:
        """One-line human summary."""
        done = self.steps - (self.resumed_from or 0)
        parts = [f"trained {done} steps in {self.seconds:.1f}s"]
        parts[0] += f" ({self.examples_per_second:.1f} examples/s)"
        if self.resumed_from is not None:
            parts.append(f"resumed from step {self.resumed_from}, ended at step {self.steps}")
        if self.dev_score is not None:
            parts.append(f"best dev {self.dev_metric} {self.dev_score:.2f}")
        for name, scores in self.test_metrics.items():
            before = scores.get("before")
            digits = 4 if scores["metric"] == "pair_f1" else 2  # F1 changes of 0.01 matter
            change = f"{before:.{digits}f} -> " if before is not None else ""
            after = f"{scores['after']:.{digits}f}"
            parts.append(f"test {name} {scores['metric']} {change}{after}")
        return "; ".join(parts) + f"; saved to {self.output}"


def resolve_config(args: argparse.Namespace) -> FinetuneConfig:
    """The config file, then ``key=value`` overrides, then flags."""
    overrides = list(args.overrides)
    for key, value in (("model", args.model), ("output", args.output)):
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    if args.overwrite:
        overrides.append("overwrite=true")
    if args.resume is not None:
        overrides.append(f"training.resume={'true' if args.resume else 'false'}")
    config = load_config(FinetuneConfig, args.config, overrides)
    if not config.output:
        raise ValueError("no output directory: set output in the config or pass --output")
    if not config.train.path:
        raise ValueError("no training data: set train.path in the config")
    if config.training.checkpoint_dir is None:
        config.training.checkpoint_dir = f"{Path(config.output)}.checkpoints"
    config.training.validate()
    return config


def run(argv: list[str] | None = None) -> FinetuneSummary:
    """Fine-tune as the options say and save the model; returns the summary.

    Raises:
        ValueError / DataFileError / ModelLoadError / FileExistsError: bad config, data, model
            or an existing output, all before training starts.
        JobFailedError: the loss diverged (the last checkpoint is kept).
    """
    from pipelines.stage_api.stops import JobFailedError

    args = build_parser().parse_args(argv)
    config = resolve_config(args)
    output = Path(config.output)
    if output.exists() and any(output.iterdir()) and not config.overwrite:
        raise FileExistsError(f"{output} exists and is not empty; pass --overwrite to replace it")

    check_data_kind(config.objective.name, config.train.example_kind, config.train.path)
    # Copies of a text are the texts dedup treats as one (NFKC, casefold, punctuation).
    train_examples = load_examples(config.train, text_key)
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
    names = _short_names([examples.source for examples in test_examples])
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
    try:
        result = train(loss, train_examples, config.training, evaluator=dev_evaluator)
    except TrainingDivergedError as err:
        raise JobFailedError(str(err)) from err

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
        data = {"train": train_examples, "dev": dev_examples, "test": test_examples}
        manifest = _manifest(config, base, data, result, before, after)
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
    return FinetuneSummary(
        output=str(output),
        steps=result.steps,
        seconds=result.seconds,
        examples_per_second=result.examples_per_second,
        dev_metric=result.primary_metric,
        dev_score=result.best_score,
        test_metrics=test_metrics if is_main else {},
        resumed_from=result.resumed_from,
    )


def _short_names(paths: list[str]) -> list[str]:
    """``folder/file`` names for test sets (``stsb/test.tsv.gz``, ``snli/test.tsv.gz``),
    numbered where they still collide."""
    names = []
    for path in paths:
        name = "/".join(Path(path).parts[-2:])
        names.append(name if name not in names else f"{name}#{len(names) + 1}")
    return names


def _manifest(
    config: FinetuneConfig,
    base: dict,
    data: dict,
    result: TrainingResult,
    before: dict,
    after: dict,
) -> dict:
    import numpy
    import torch
    import transformers

    def describe(examples: ExampleSet | None) -> dict | None:
        if examples is None:
            return None
        path = Path(examples.source)
        return {
            "path": str(path.resolve()),
            "sha256": sha256_of_files([path]),
            "kind": examples.kind,
            "examples": len(examples),
        }

    return {
        "model_id": str(Path(config.output).resolve()),
        "base_model": base,
        "objective": config_to_dict(config.objective),
        "training_data": {
            "train": describe(data["train"]),
            "dev": describe(data["dev"]),
            "test": [describe(examples) for examples in data["test"]],
        },
        "config": config_to_dict(config),
        "training": {
            "steps": result.steps,
            "total_steps": result.total_steps,
            "seconds": round(result.seconds, 3),
            "examples_per_second": round(result.examples_per_second, 2),
            "world_size": result.world_size,
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


def model_card(manifest: dict) -> str:
    """A README.md for the model directory, from its manifest."""
    base = manifest["base_model"]
    objective = manifest["objective"]
    config = manifest["config"]
    training = config["training"]
    data = manifest["training_data"]
    lines = [
        "---",
        "library_name: sentence-transformers",
        "pipeline_tag: sentence-similarity",
        "tags: [sentence-transformers, sentence-similarity, sbert-pipeline]",
        f"base_model: {base['model_id']}",
        "---",
        "",
        f"# {Path(manifest['model_id']).name}",
        "",
        f"A Sentence-BERT model fine-tuned from `{base['model_id']}` with the "
        f"`{objective['name']}` objective by sbert-pipeline "
        f"{manifest['software']['sbert_pipeline']}. "
        f"It maps text to {base['dim']}-dimensional vectors ({base['pooling']} pooling"
        f"{', L2-normalised' if base['normalized'] else ''}); compare them with cosine similarity.",
        "",
        "## Use",
        "",
        "```bash",
        f"sbert embed --model {manifest['model_id']} --input 'corpus/*.jsonl' --output embeddings/",
        "```",
        "",
        "```python",
        "from sentence_transformers import SentenceTransformer",
        "",
        f'model = SentenceTransformer("{manifest["model_id"]}")',
        'vectors = model.encode(["A man is playing a guitar.", "Someone plays music."])',
        "```",
        "",
        "## Training",
        "",
        "| data | path | kind | examples | sha256 |",
        "|---|---|---|---|---|",
    ]
    entries = [("train", data["train"]), ("dev", data["dev"])]
    entries += [("test", entry) for entry in data["test"]]
    for role, entry in entries:
        if entry is not None:
            lines.append(
                f"| {role} | `{entry['path']}` | {entry['kind']} | {entry['examples']} "
                f"| `{entry['sha256'][:16]}…` |"
            )
    run = manifest["training"]
    lines += [
        "",
        f"Objective: `{objective['name']}`"
        + (
            f" over ({', '.join(objective['concatenation'])})"
            if objective["name"] == "softmax"
            else ""
        )
        + f". Batch {training['batch_size']}, AdamW lr {training['learning_rate']:g} "
        f"(weight decay {training['weight_decay']:g}), linear warm-up over "
        f"{training['warmup_ratio']:.0%} of {run['total_steps']} steps then linear decay, "
        f"{training['epochs']} epoch(s), seed {training['seed']}, precision "
        f"{training['precision']}, {run['world_size']} process(es); "
        f"{run['steps']} steps in {run['seconds']:.0f} s.",
        "",
    ]
    dev = manifest["metrics"]["dev"]
    if dev["best_step"] is not None:
        lines += [
            f"Dev {dev['primary_metric']}: best {dev['best_score']:.2f} at step "
            f"{dev['best_step']} (these weights).",
            "",
        ]
    tests = manifest["metrics"]["test"]
    if tests["after"]:
        lines += ["## Evaluation", "", "| test set | metric | base model | fine-tuned |"]
        lines.append("|---|---|---|---|")
        for name, metrics in tests["after"].items():
            for metric, value in metrics.items():
                if metric.startswith("n_"):
                    continue
                base_value = tests["before"].get(name, {}).get(metric)
                shown = "–" if base_value is None else f"{base_value:.2f}"
                lines.append(f"| {name} | {metric} | {shown} | {value:.2f} |")
        lines.append("")
    if manifest["metrics"].get("dedup"):
        lines += card_lines(manifest["metrics"]["dedup"])
    software = ", ".join(f"{k} {v}" for k, v in manifest["software"].items())
    lines += [f"Software: {software}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run (or print the config) and print the summary on the main process."""
    args = build_parser().parse_args(argv)
    progress = logging.getLogger(TRAINING_LOGGER)
    if progress.level == logging.NOTSET:
        progress.setLevel(logging.INFO)
    if args.print_config:
        import yaml

        print(yaml.safe_dump(config_to_dict(resolve_config(args)), sort_keys=False), end="")
        return 0
    summary = run(argv)
    if int(os.environ.get("RANK", "0")) == 0:
        print(summary.line())
    return 0


if __name__ == "__main__":
    # ``torchrun -m jobs.finetune`` starts here rather than in the ``sbert`` entry point, so
    # errors a user can fix are printed the way ``sbert`` prints them.
    from jobs.cli import USER_ERRORS
    from pipelines.stage_api.stops import JobFailedError

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        sys.exit(main())
    except USER_ERRORS as error:
        print(f"sbert finetune: error: {error}", file=sys.stderr)
        sys.exit(2)
    except JobFailedError as error:
        print(f"sbert finetune: job failed: {error}", file=sys.stderr)
        sys.exit(1)
