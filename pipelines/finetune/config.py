"""The fine-tuning config (:class:`FinetuneConfig`, the YAML or JSON file ``--config`` names)
and its resolution: the file, then the ``key=value`` overrides, then the options that set a
config value (``--model``, ``--output``, ``--overwrite``, ``--resume``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sbert_pipeline.finetune.holdout_grouping import DedupTestConfig
from sbert_pipeline.finetune.options import Options
from sbert_pipeline.io.path_relations import overlap_error

from sbert_core import DEFAULT_MODEL
from sbert_core.config import load_config
from sbert_core.training.config import TrainingConfig
from sbert_core.training.data import DataSpec
from sbert_core.training.losses import LossConfig


@dataclass
class FinetuneConfig:
    """Everything a fine-tuning run needs; each section is a YAML mapping."""

    # bi_encoder: a sentence embedding model (the objectives of sbert_core.training.losses).
    # cross_encoder: a pair scorer (objective binary_cross_entropy, train/dev/test of kind
    # duplicate_pairs, labelled_pairs or scored_pairs; pipelines/finetune/cross_encoder_run.py).
    kind: Literal["bi_encoder", "cross_encoder"] = "bi_encoder"
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
    # Dedup pair-F1 on the holdout part of labelled duplicates (holdout_grouping.py), before (with
    # evaluate_base_model) and after training; into the manifest and the model card.
    dedup_test: DedupTestConfig | None = None
    evaluate_base_model: bool = True
    # Delete OUTPUT.checkpoints/ once the model is saved.
    remove_checkpoints: bool = True
    training: TrainingConfig = field(default_factory=TrainingConfig)


def resolve_config(options: Options) -> FinetuneConfig:
    """The config file, then ``options.overrides``, then the options that override a value.

    Raises:
        ValueError: an unreadable config, an unknown key or a bad value (naming it), no output
            directory or no training data.
    """
    overrides = list(options.overrides)
    for key, value in (("model", options.model), ("output", options.output)):
        if value is not None:
            overrides.append(f"{key}={json.dumps(value)}")
    for key, flag in (("overwrite", options.overwrite), ("training.resume", options.resume)):
        if flag is not None:
            overrides.append(f"{key}={'true' if flag else 'false'}")
    config = load_config(FinetuneConfig, options.config, overrides)
    if not config.output:
        raise ValueError("no output directory: set output in the config or pass --output")
    if not config.train.path:
        raise ValueError("no training data: set train.path in the config")
    check_model_kind(config)
    _refuse_output_over_inputs(config)
    if config.training.checkpoint_dir is None:
        config.training.checkpoint_dir = f"{Path(config.output)}.checkpoints"
    config.training.validate()
    return config


def check_model_kind(config: FinetuneConfig) -> None:
    """Refuse an objective or section the model kind cannot train with, naming the key.

    Raises:
        ValueError: ``binary_cross_entropy`` or a ``cosine_band`` with a bi-encoder, another
            objective or a ``dedup_test`` section with a cross-encoder, a band that is none,
            band vectors for pairs without question ids.
    """
    bce = config.objective.name == "binary_cross_entropy"
    sections = [("train", config.train), ("dev", config.dev)]
    sections += [(f"test.{i}", spec) for i, spec in enumerate(config.test)]
    for name, spec in sections:
        if spec is None or spec.cosine_band is None:
            continue
        if config.kind != "cross_encoder":
            raise ValueError(
                f"{name}.cosine_band: keeps the pairs a cross-encoder will verify; set kind: "
                "cross_encoder, or remove it"
            )
        spec.cosine_band.check(f"{name}.cosine_band")
        if spec.cosine_band.vectors is not None and spec.kind != "duplicate_pairs":
            raise ValueError(
                f"{name}.cosine_band.vectors: are found by question id, which only kind "
                "duplicate_pairs has; remove vectors and vector_ids to embed the texts"
            )
    if config.kind == "bi_encoder" and bce:
        raise ValueError(
            "objective.name: binary_cross_entropy trains a cross-encoder; set kind: cross_encoder"
        )
    if config.kind == "cross_encoder":
        if not bce:
            raise ValueError(
                "objective.name: kind cross_encoder trains with binary_cross_entropy, not "
                f"{config.objective.name}"
            )
        if config.dedup_test is not None:
            raise ValueError(
                "dedup_test: dedup pair-F1 embeds with a bi-encoder; a cross-encoder is scored "
                "on the labelled pairs of its dev and test sections (AP, best F1)"
            )
        scored = [("dev", config.dev), *((f"test.{i}", s) for i, s in enumerate(config.test))]
        for name, spec in scored:
            if spec is not None:
                _check_apart_from_training(name, spec, config.train)


def _check_apart_from_training(name: str, spec: DataSpec, train: DataSpec) -> None:
    """Refuse a dev or test part of the training file that overlaps the training part.

    Raises:
        ValueError: the same part (or ``all``) of the same duplicate_pairs file, or its other
            part cut with another split, naming the section.
    """
    if not (spec.kind == train.kind == "duplicate_pairs" and spec.path == train.path):
        return
    if "all" in (spec.part, train.part) or spec.part == train.part:
        raise ValueError(
            f"{name}.part: {spec.part} of {spec.path} overlaps the training part ({train.part})"
        )
    mine = (spec.holdout_fraction, spec.split_seed, spec.limit)
    theirs = (train.holdout_fraction, train.split_seed, train.limit)
    if mine != theirs:
        raise ValueError(
            f"{name}: splits {spec.path} with (holdout_fraction, split_seed, limit) {mine} but "
            f"train with {theirs}: its {spec.part} part would overlap the training part"
        )


def _refuse_output_over_inputs(config: FinetuneConfig) -> None:
    """Refuse an ``output`` equal to, inside or above the base model folder or a data file, as
    every stage's options refuse such an output (the config, not the options, names these).

    Raises:
        ValueError: naming the output and the input.
    """
    inputs = [("train.path", config.train.path)]
    if config.dev is not None:
        inputs.append(("dev.path", config.dev.path))
    inputs += [(f"test[{i}].path", spec.path) for i, spec in enumerate(config.test)]
    if "://" in config.model or Path(config.model).exists():
        inputs.append(("model", config.model))
    for name, path in inputs:
        why = overlap_error(config.output, name, path) if path else None
        if why is not None:
            raise ValueError(f"output: {why}")
