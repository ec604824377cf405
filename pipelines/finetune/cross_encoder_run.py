"""``sbert finetune`` with ``kind: cross_encoder``: labelled pairs -> a trained cross-encoder.

The config is a :class:`~sbert_pipeline.finetune.config.FinetuneConfig` with ``kind:
cross_encoder`` and ``objective: {name: binary_cross_entropy}``:

* ``model``: where training starts. A cross-encoder folder trains further; any other encoder
  (the bundled ``all-MiniLM-L6-v2``, a sentence-transformers or Hugging Face folder) gets a new
  one-label classification head (:mod:`sbert_core.training.cross_encoder_start`).
* ``train``, ``dev``, ``test``: pairs with a target in [0, 1]
  (:mod:`sbert_core.training.cross_encoder_data`): ``duplicate_pairs`` (every labelled pair of
  the ``part``, the component-wise split of the bi-encoder's QQP training, so ``part: holdout``
  of the same file, fraction and seed shares no question with ``part: train``),
  ``labelled_pairs`` with two labels, or ``scored_pairs``.
* ``training``: the bi-encoder's :class:`~sbert_core.training.config.TrainingConfig` (batch,
  lr, warm-up, epochs / max_steps, precision, seed, checkpoints; ``max_seq_length`` is the
  pair's truncation length). Pooling and prompts do not apply.

The loss is binary cross-entropy on the logit (:mod:`sbert_core.training.cross_encoder_fit`);
the saved model applies Sigmoid, so its scores are probabilities. Each ``test`` set (and the
``dev`` set, which picks the best weights by AP) is scored before training (the new head, with
``evaluate_base_model``) and after: average precision, best F1, its precision, recall and
threshold, into ``sbert_manifest.json`` (``metrics.test``) and the model card README.md.

The output is a sentence-transformers CrossEncoder folder (``CrossEncoder(OUTPUT)`` in
sentence-transformers and ``sbert_core.CrossEncoder.load(OUTPUT)`` give the same scores), built
beside OUTPUT and renamed into place.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from sbert_pipeline.finetune.config import FinetuneConfig
from sbert_pipeline.finetune.cross_encoder_card import cross_encoder_card
from sbert_pipeline.finetune.data_records import (
    MODEL_CARD,
    describe_data,
    short_names,
    training_manifest,
    training_summary,
    warn_single_target,
)
from sbert_pipeline.finetune.finetune_summary import FinetuneSummary
from sbert_pipeline.finetune.progress import StepBar
from sbert_pipeline.io.text_normal import text_key
from sbert_pipeline.stage_api.stops import JobFailedError
from sbert_pipeline.vectors.progress import stage_progress

from sbert_core.inference.cross_encoder import CrossEncoder
from sbert_core.model.artifact import MANIFEST_FILE
from sbert_core.model.export import staged_model_folder
from sbert_core.training.checkpoint import seed_everything
from sbert_core.training.cosine_band import StoredVectors
from sbert_core.training.cross_encoder_data import keep_in_band, load_cross_encoder_pairs
from sbert_core.training.cross_encoder_eval import PairScoreEvaluator
from sbert_core.training.cross_encoder_fit import fit_cross_encoder
from sbert_core.training.cross_encoder_start import start_cross_encoder
from sbert_core.training.data import DataSpec, ExampleSet, load_duplicate_split
from sbert_core.training.distributed import training_device
from sbert_core.training.loop import TrainingDivergedError
from sbert_core.training.step_loop import resolve_precision

# Step, loss and ETA lines, and what the start model was built from, are shown unless the user
# has set these loggers' levels.
PROGRESS_LOGGERS = (
    "sbert_core.training.cross_encoder_fit",
    "sbert_core.training.cross_encoder_start",
    "sbert_core.training.cross_encoder_eval",
    "sbert_core.training.cross_encoder_data",
)
# Scores shown per test set in the run's summary line.
SUMMARY_METRICS = (("", "ap"), (" best", "f1"))


def finetune_cross_encoder(config: FinetuneConfig) -> FinetuneSummary:
    """Read and check the data, start the model, score it, train, score again and save.

    Raises:
        FileExistsError: OUTPUT exists, is not empty and ``overwrite`` is off.
        ValueError / DataFileError / ModelLoadError: bad config, data or model, all before
            training starts.
        JobFailedError: the loss diverged (the last checkpoint is kept).
    """
    for name in PROGRESS_LOGGERS:
        progress = logging.getLogger(name)
        if progress.level == logging.NOTSET:
            progress.setLevel(logging.INFO)
    output = Path(config.output)
    if output.exists() and any(output.iterdir()) and not config.overwrite:
        raise FileExistsError(f"{output} exists and is not empty; pass --overwrite to replace it")

    train = _load_pairs(config, config.train, "train")
    warn_single_target(train, config.objective.name)
    dev = _load_pairs(config, config.dev, "dev") if config.dev is not None else None
    tests = [_load_pairs(config, spec, f"test.{i}") for i, spec in enumerate(config.test)]
    dev_evaluator = PairScoreEvaluator(dev, "dev") if dev is not None else None
    names = short_names([examples.source for examples in tests])
    test_evaluators = [
        PairScoreEvaluator(examples, name) for examples, name in zip(tests, names, strict=True)
    ]

    seed_everything(config.training.seed)  # the new head is drawn from the seeded generators
    model = start_cross_encoder(
        config.model,
        allow_pickle=config.allow_pickle,
        max_length=config.training.max_seq_length,
        device=training_device(config.training),
    )
    base = model.describe()
    before = (
        {evaluator.name: evaluator(model) for evaluator in test_evaluators}
        if config.evaluate_base_model
        else {}
    )
    steps = StepBar()
    try:
        result = fit_cross_encoder(
            model, train, config.training, evaluator=dev_evaluator, callbacks=[steps]
        )
    except TrainingDivergedError as err:
        raise JobFailedError(str(err)) from err
    finally:
        steps.close()
    after = {evaluator.name: evaluator(model) for evaluator in test_evaluators}

    data = {
        "train": _describe(train, config.train),
        "dev": _describe(dev, config.dev),
        "test": [
            _describe(examples, spec) for examples, spec in zip(tests, config.test, strict=True)
        ],
    }
    _save(
        model,
        output,
        training_manifest(config, base, data, result, before, after),
        config.overwrite,
    )
    if config.remove_checkpoints:
        shutil.rmtree(config.training.checkpoint_dir, ignore_errors=True)
    # The summary line reads "test NAME ap B -> A; test NAME best f1 B -> A".
    test_metrics = {
        f"{name}{label}": {
            "metric": metric,
            "before": before.get(name, {}).get(metric),
            "after": scores[metric],
        }
        for name, scores in after.items()
        for label, metric in SUMMARY_METRICS
    }
    return training_summary(output, result, test_metrics)


def _load_pairs(config: FinetuneConfig, spec: DataSpec, name: str) -> ExampleSet:
    """The pairs of ``spec`` (section ``name``), only those in its ``cosine_band`` if it has
    one: their texts embedded by the band's bi-encoder on the training device, in the training
    precision, with a progress bar, or their vectors read from the band's ``vectors``."""
    examples = load_cross_encoder_pairs(spec, text_key, name=name)
    band = spec.cosine_band
    if band is None:
        return examples
    if band.vectors is not None:
        split = load_duplicate_split(spec, text_key)  # the question ids of the texts
        encoder = StoredVectors(band, split.ids, split.texts)
    else:
        from sbert_core.inference.encoder import SentenceEncoder

        device = training_device(config.training)
        encoder = SentenceEncoder.load(
            band.model,
            device=device,
            dtype=resolve_precision(config.training.precision, device),
            allow_pickle=config.allow_pickle,
        )
    distinct = len(set(examples.texts[0]).union(examples.texts[1]))
    with stage_progress(f"{name} cosine band", total=distinct, unit="texts") as bar:
        return keep_in_band(examples, band, encoder, name=name, progress=bar.update)


def _describe(examples, spec) -> dict | None:
    """A data set's manifest entry, with the file's kind and part (the pairs are held as
    scored pairs whatever the file's kind)."""
    entry = describe_data(examples)
    if entry is not None:
        entry.update(
            kind=spec.kind, part=spec.part, pairs_positive=int((examples.targets >= 0.5).sum())
        )
    return entry


def _save(model: CrossEncoder, output: Path, training: dict, overwrite: bool) -> None:
    """Write the CrossEncoder folder with the training fields in its manifest and the model
    card; OUTPUT appears whole or not at all."""
    with staged_model_folder(output, overwrite=overwrite) as staging:
        model.save(staging, overwrite=True)  # the staging folder is empty
        manifest_path = staging / MANIFEST_FILE
        manifest = {**json.loads(manifest_path.read_text(encoding="utf-8")), **training}
        (staging / MODEL_CARD).write_text(cross_encoder_card(manifest), encoding="utf-8")
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
