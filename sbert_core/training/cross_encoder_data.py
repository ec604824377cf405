"""Labelled pairs for a cross-encoder: ``(text, text)`` with a target in [0, 1].

A cross-encoder trains with binary cross-entropy on one logit, so every pair needs a target
between 0 (unrelated) and 1 (duplicate, paraphrase, relevant). Three kinds of
:class:`~sbert_core.training.data.DataSpec` give one:

=================== ===========================================================================
kind                target
=================== ===========================================================================
``duplicate_pairs`` the 0/1 label of every labelled pair of the spec's ``part`` (both labels:
                    a cross-encoder learns from the non-duplicates too), from the same
                    component-wise split the bi-encoder's training uses
``labelled_pairs``  the label's index in ``labels``, which must list two names, the negative
                    first (``labels: ["0", "1"]``)
``scored_pairs``    the score scaled from ``score_range`` to [0, 1] (``score_range: [0, 1]``
                    for scores already in [0, 1]); a score outside the range is refused
=================== ===========================================================================

The result is an :class:`~sbert_core.training.data.ExampleSet` of kind ``scored_pairs``
(two text columns, float32 targets), so the bi-encoder's batch plan and fingerprint serve it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sbert_core.errors import DataFileError
from sbert_core.training.data import DataSpec, ExampleSet, load_duplicate_split, load_examples

# The data kinds a cross-encoder trains and is evaluated on.
CROSS_ENCODER_KINDS = ("duplicate_pairs", "labelled_pairs", "scored_pairs")


def load_cross_encoder_pairs(
    spec: DataSpec, text_key: Callable[[str], str] | None = None, *, name: str = "train"
) -> ExampleSet:
    """The pairs of ``spec`` with their targets in [0, 1] (module docstring).

    Args:
        spec: the file, its kind and (duplicate_pairs) its part of the split.
        text_key: ``duplicate_pairs``: texts with one key are copies of one question.
        name: the config section of ``spec`` (``train``, ``dev``, ``test.0``), for messages.

    Raises:
        ValueError: a kind a cross-encoder cannot use, hard negatives, a label vocabulary that
            is not two names (each naming the config key).
        DataFileError: as :func:`~sbert_core.training.data.load_examples`, and a part without
            pairs or a target outside [0, 1].
    """
    if spec.kind not in CROSS_ENCODER_KINDS:
        raise ValueError(
            f"{name}.kind: a cross-encoder trains on {', '.join(CROSS_ENCODER_KINDS)}, "
            f"not {spec.kind}"
        )
    if spec.hard_negatives.enabled:
        raise ValueError(
            f"{name}.hard_negatives: a cross-encoder trains on the labelled pairs themselves; "
            "set mode none"
        )
    if spec.kind == "duplicate_pairs":
        split = load_duplicate_split(spec, text_key)
        rows = np.flatnonzero(split.rows_in(spec.part))
        if not rows.size:
            raise DataFileError(f"{spec.path}: no labelled pairs in the {spec.part} part")
        q1, q2 = split.row1[rows], split.row2[rows]
        texts = (tuple(split.texts[q] for q in q1), tuple(split.texts[q] for q in q2))
        targets = split.label[rows].astype(np.float32)
        return ExampleSet("scored_pairs", texts, targets, source=spec.path)
    if spec.kind == "labelled_pairs" and len(spec.labels) != 2:
        raise ValueError(
            f"{name}.labels: a cross-encoder learns one score, so labelled pairs need two "
            f'labels, the negative first (e.g. ["0", "1"]); got {list(spec.labels)}'
        )
    examples = load_examples(spec, text_key)
    targets = np.asarray(examples.targets, dtype=np.float32)
    outside = np.flatnonzero((targets < 0) | (targets > 1) | ~np.isfinite(targets))
    if outside.size:  # the loaders scale into [0, 1]; a target outside it is a bug upstream
        raise DataFileError(
            f"{examples.source}: row {int(outside[0]) + 1}: target {targets[outside[0]]:g} is "
            "outside [0, 1]"
        )
    return ExampleSet("scored_pairs", examples.texts, targets, source=examples.source)


def binary_labels(examples: ExampleSet) -> np.ndarray:
    """``(N,)`` bool: the pairs counted as positives when scoring (target 0.5 or more)."""
    return np.asarray(examples.targets) >= 0.5
