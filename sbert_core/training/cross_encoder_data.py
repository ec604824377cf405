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

**Mined negatives** (``duplicate_pairs``, part ``train``, ``hard_negatives: {mode: mined,
vectors: base.npy, vector_ids: ids.txt}``): each duplicate pair ``(a, p)`` also gives a pair
``(a, n)`` with target 0, ``n`` the train question nearest to ``a`` by the bi-encoder's vectors
that is outside ``a``'s duplicate group, passes the false-negative guards
(:func:`~sbert_core.training.hard_negatives.mined_candidates`: ``relative_margin``,
``max_score``, ``range_max``) and is not labelled with ``a`` already (its labelled pairs, both
labels, are training pairs anyway). Modes ``labelled`` and ``labelled+mined`` would only repeat
labelled pairs, so they are refused.

**The cosine band** (``cosine_band: {model: all-MiniLM-L6-v2, low: 0.8}``,
:mod:`sbert_core.training.cosine_band`): :func:`keep_in_band` keeps the pairs whose cosine by
that bi-encoder lies in the band, the pairs verify will be asked about.

The result is an :class:`~sbert_core.training.data.ExampleSet` of kind ``scored_pairs``
(two text columns, float32 targets), so the bi-encoder's batch plan and fingerprint serve it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from sbert_core.errors import DataFileError
from sbert_core.training.cosine_band import CosineBand
from sbert_core.training.data import DataSpec, ExampleSet, load_duplicate_split, load_examples
from sbert_core.training.duplicate_pairs import DuplicateSplit
from sbert_core.training.hard_negatives import load_vectors, mined_candidates

logger = logging.getLogger(__name__)

# Distinct texts per encode call of the cosine band: the progress callback follows each chunk.
_CHUNK = 1024
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
    negatives = spec.hard_negatives
    if negatives.enabled and (
        negatives.mode != "mined" or spec.kind != "duplicate_pairs" or spec.part != "train"
    ):
        raise ValueError(
            f"{name}.hard_negatives: a cross-encoder takes mode mined (bi-encoder negatives "
            "for the duplicate pairs of a duplicate_pairs train part) or none; the labelled "
            f"non-duplicates are training pairs already (got mode {negatives.mode}, kind "
            f"{spec.kind}, part {spec.part})"
        )
    if spec.kind == "duplicate_pairs":
        split = load_duplicate_split(spec, text_key)
        rows = np.flatnonzero(split.rows_in(spec.part))
        if not rows.size:
            raise DataFileError(f"{spec.path}: no labelled pairs in the {spec.part} part")
        q1, q2 = split.row1[rows], split.row2[rows]
        targets = split.label[rows].astype(np.float32)
        if negatives.enabled:
            n1, n2 = mined_negative_pairs(split, spec)
            q1, q2 = np.r_[q1, n1], np.r_[q2, n2]
            targets = np.r_[targets, np.zeros(n1.size, np.float32)]
        texts = (tuple(split.texts[q] for q in q1), tuple(split.texts[q] for q in q2))
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


def mined_negative_pairs(split: DuplicateSplit, spec: DataSpec) -> tuple[np.ndarray, np.ndarray]:
    """``(anchors, negatives)``: question indices of one mined negative per duplicate pair of
    the train part (module docstring); pairs without a candidate get none (counted, logged).

    Raises:
        DataFileError / ValueError: as :func:`~sbert_core.training.hard_negatives.load_vectors`
            and a bad ``hard_negatives`` setting.
    """
    config = spec.hard_negatives
    config.check()
    duplicates = np.flatnonzero(split.rows_in("train") & split.label)
    q1, q2 = split.row1[duplicates], split.row2[duplicates]
    candidates = mined_candidates(split, load_vectors(config, split), q1, q2, config)
    labelled = {
        (min(a, b), max(a, b))
        for a, b in zip(split.row1.tolist(), split.row2.tolist(), strict=True)
    }
    anchors, chosen = [], []
    for anchor, options in zip(q1.tolist(), candidates, strict=True):
        fresh = [n for n in options if (min(anchor, n), max(anchor, n)) not in labelled]
        if fresh:
            anchors.append(anchor)
            chosen.append(fresh[0])
    logger.info(
        "%s: %d mined negative pairs for %d duplicate pairs (%d without a candidate)",
        spec.path,
        len(chosen),
        q1.size,
        q1.size - len(chosen),
    )
    return np.asarray(anchors, dtype=np.int64), np.asarray(chosen, dtype=np.int64)


def binary_labels(examples: ExampleSet) -> np.ndarray:
    """``(N,)`` bool: the pairs counted as positives when scoring (target 0.5 or more)."""
    return np.asarray(examples.targets) >= 0.5


def pair_cosines(
    encoder, texts: tuple[tuple[str, ...], ...], progress: Callable[[int], None] | None = None
) -> np.ndarray:
    """``(N,)`` float32 cosine of each pair ``(texts[0][i], texts[1][i])`` by ``encoder`` (a
    :class:`~sbert_core.inference.encoder.SentenceEncoder`); every distinct text is embedded
    once, ``progress(n)`` called after each chunk of ``n`` texts."""
    first, second = texts
    distinct = list(dict.fromkeys([*first, *second]))
    row = {text: i for i, text in enumerate(distinct)}
    vectors = []
    for start in range(0, len(distinct), _CHUNK):
        chunk = distinct[start : start + _CHUNK]
        encoded = encoder.encode(chunk, normalize_embeddings=True, show_progress_bar=False)
        vectors.append(np.asarray(encoded, dtype=np.float32))
        if progress is not None:
            progress(len(chunk))
    unit = np.concatenate(vectors) if vectors else np.zeros((0, 1), np.float32)
    a = unit[[row[text] for text in first]]
    b = unit[[row[text] for text in second]]
    return np.einsum("ij,ij->i", a, b)


def keep_in_band(
    examples: ExampleSet,
    band: CosineBand,
    encoder,
    *,
    name: str = "train",
    progress: Callable[[int], None] | None = None,
) -> ExampleSet:
    """The pairs of ``examples`` whose cosine by ``encoder`` lies in ``band``; logs how many
    of how many were kept (and the positives among them).

    Raises:
        ValueError: the pairs are not pairs, or none is left (naming ``name``).
    """
    if len(examples.texts) != 2:
        raise ValueError(f"{name}.cosine_band: keeps pairs, but the examples are not pairs")
    cosines = pair_cosines(encoder, examples.texts, progress)
    kept = np.flatnonzero(band.contains(cosines))
    if not kept.size:
        raise ValueError(
            f"{name}.cosine_band: no pair of {examples.source} has a cosine in {band.edges()} by "
            f"{band.model}; lower cosine_band.low"
        )
    chosen = examples.select(kept)
    positives = (
        f", {int((np.asarray(chosen.targets) >= 0.5).sum())} of them positive"
        if chosen.targets is not None
        else ""
    )
    logger.info(
        "%s: kept %d of %d pairs whose cosine by %s lies in %s%s",
        name,
        kept.size,
        len(examples),
        band.model,
        band.edges(),
        positives,
    )
    return chosen
