"""Dedup pair-F1 on a held-out part of labelled duplicates, before and after fine-tuning.

The ``dedup_test`` section of a finetune config names a ``duplicate_pairs`` file and its holdout
part (the same component-wise split the training part comes from, so no question or group of the
holdout was trained on). For the base model and again for the fine-tuned one:

1. embed the holdout's questions (from ``questions``, a question file, or else from the pairs);
2. find every pair of questions with cosine ``>= floor`` exactly
   (:func:`sbert_pipeline.vectors.pairs_above.self_pairs_above`);
3. group them with each of ``methods`` over the threshold sweep, with the settings ``sbert
   dedup`` uses by default (:class:`sbert_pipeline.grouping.compare.MethodSettings`: central
   ranking, star radius ``T - 0.10``), and score "both questions end in one group" on the
   holdout's labelled pairs (:mod:`sbert_pipeline.grouping.labels`);
4. report, per method, the best-F1 threshold with its precision, recall, F1 and largest group.

The numbers go into the model's manifest (``metrics.dedup``) and its model card.

Example (YAML)::

    dedup_test:
      pairs: {path: ../shared/data/qqp/dev_pairs.tsv.gz, kind: duplicate_pairs, part: holdout,
              columns: {id1: qid1, id2: qid2, sentence1: question1, sentence2: question2,
                        label: is_duplicate}}
      questions: ../shared/data/qqp/dev_questions.tsv.gz
      question_columns: {id: qid, text: question}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from sbert_pipeline.grouping.choices import METHODS

from sbert_core.errors import DataFileError
from sbert_core.tabular import read_table, text_column
from sbert_core.training.data import DataSpec, load_duplicate_split

if TYPE_CHECKING:
    from sbert_pipeline.grouping.labels import LabelledPairs

# The grouping modules (numba kernels) are imported where they are used, so that a finetune
# run without a dedup_test loads none of them.

logger = logging.getLogger(__name__)


@dataclass
class DedupTestConfig:
    """Dedup on the holdout of a component-wise split (module docstring)."""

    # kind duplicate_pairs, part holdout, with the training spec's split (fraction and seed).
    pairs: DataSpec = field(default_factory=DataSpec)
    # A question file (id and text columns) to take the texts from; every question of the
    # holdout must be in it. None: the texts in the pairs file.
    questions: str | None = None
    question_columns: dict[str, str] = field(default_factory=lambda: {"id": "id", "text": "text"})
    methods: tuple[str, ...] = ("star", "components")
    # Exact all-pairs down to this cosine; the sweep runs from here to sweep_stop.
    floor: float = 0.5
    sweep_stop: float = 0.95
    sweep_step: float = 0.01
    # Autocast for embedding the holdout: bfloat16 is faster on CPUs with AVX512-BF16/AMX and
    # on GPUs; the vectors are compared in float32 either way.
    compute_dtype: Literal["float32", "bfloat16"] = "float32"
    # The base model's vectors of these questions, computed earlier (a float32 .npy with one row
    # per line of base_vector_ids), instead of embedding the holdout with the base model again.
    # Checked first: a sample of holdout questions is embedded and must match them (cosine).
    base_vectors: str | None = None
    base_vector_ids: str | None = None
    base_check_sample: int = 64

    def check(self, train: DataSpec) -> None:
        """Raise ``ValueError`` for a bad section, or a split that differs from ``train``'s."""
        if self.pairs.kind != "duplicate_pairs" or self.pairs.part != "holdout":
            raise ValueError("dedup_test.pairs needs kind duplicate_pairs and part holdout")
        unknown = [m for m in self.methods if m not in METHODS]
        if not self.methods or unknown:
            raise ValueError(
                f"dedup_test.methods must name methods from {', '.join(METHODS)}, "
                f"got {list(self.methods)}"
            )
        from sbert_pipeline.grouping.sweep import sweep_thresholds

        sweep_thresholds(self.floor, self.sweep_stop, self.sweep_step)  # raises on bad bounds
        if (self.base_vectors is None) != (self.base_vector_ids is None):
            raise ValueError("dedup_test.base_vectors and base_vector_ids go together")
        if train.kind == "duplicate_pairs" and train.path == self.pairs.path:
            mine = (self.pairs.holdout_fraction, self.pairs.split_seed, self.pairs.limit)
            theirs = (train.holdout_fraction, train.split_seed, train.limit)
            if mine != theirs:
                raise ValueError(
                    f"dedup_test.pairs splits {self.pairs.path} with (holdout_fraction, "
                    f"split_seed, limit) {mine} but train with {theirs}: the holdout would "
                    "overlap the training part"
                )


@dataclass(frozen=True)
class Holdout:
    """The holdout corpus and its labelled pairs, read and checked before training."""

    ids: list[str]
    texts: list[str]
    labelled: LabelledPairs
    source: str
    questions_left_out: int  # question-file rows not in the holdout (other part or unpaired)


def load_holdout(config: DedupTestConfig, text_key: Callable[[str], str] | None) -> Holdout:
    """The holdout's questions and labelled pairs.

    Raises:
        DataFileError: unreadable files, missing columns, a holdout question missing from the
            question file or with another text there.
    """
    from sbert_pipeline.grouping.labels import RawLabels, match_labels

    split = load_duplicate_split(config.pairs, text_key)
    members = split.questions_in("holdout")
    ids = [split.ids[q] for q in members]
    texts = [split.texts[q] for q in members]
    left_out = 0
    if config.questions is not None:
        table = read_table(config.questions)
        id_column = config.question_columns.get("id", "id")
        text_column_name = config.question_columns.get("text", "text")
        table.require([id_column, text_column_name])
        given = dict(
            zip(
                (str(value) for value in table.column(id_column)),
                text_column(table, text_column_name),
                strict=True,
            )
        )
        for qid, text in zip(ids, texts, strict=True):
            if given.get(qid) != text:
                found = "is missing" if qid not in given else f"has the text {given[qid]!r}"
                raise DataFileError(
                    f"{config.questions}: question {qid!r} of the holdout {found}; the pairs "
                    f"file has {text!r}"
                )
        left_out = len(given) - len(ids)
    rows = np.flatnonzero(split.rows_in("holdout"))
    raw = RawLabels(
        path=config.pairs.path,
        id_a=[split.ids[q] for q in split.row1[rows]],
        id_b=[split.ids[q] for q in split.row2[rows]],
        label=split.label[rows],
    )
    labelled = match_labels(raw, ids)
    if not labelled.positives:
        raise DataFileError(f"{config.pairs.path}: the holdout part has no duplicate pair")
    return Holdout(ids, texts, labelled, config.pairs.path, left_out)


def embed(encoder, texts: list[str], compute_dtype: str) -> np.ndarray:
    """``(n, d)`` float32 unit rows of ``texts``, computed under ``compute_dtype`` autocast."""
    import torch

    autocast = (
        torch.autocast(encoder.device.type, dtype=torch.bfloat16)
        if compute_dtype == "bfloat16"
        else nullcontext()
    )
    with torch.inference_mode(), autocast:
        vectors = np.asarray(encoder.encode(texts), dtype=np.float32)
    # Unit rows in float32 (bf16 rounding moves the norms a little), as the pairs stage expects.
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def cached_base_vectors(encoder, holdout: Holdout, config: DedupTestConfig) -> np.ndarray:
    """The holdout's rows of ``base_vectors``, after checking a sample against ``encoder``.

    Raises:
        DataFileError: unreadable files, a holdout id missing from the ids, a row count that
            differs from the ids, or sample vectors that do not match (another model).
    """
    ids = Path(config.base_vector_ids).read_text(encoding="utf-8").splitlines()
    vectors = np.load(config.base_vectors, mmap_mode="r")
    if vectors.ndim != 2 or vectors.shape[0] != len(ids):
        raise DataFileError(
            f"{config.base_vectors}: {vectors.shape} vectors for {len(ids)} ids in "
            f"{config.base_vector_ids}"
        )
    row = {qid: i for i, qid in enumerate(ids)}
    missing = [qid for qid in holdout.ids if qid not in row]
    if missing:
        raise DataFileError(
            f"{config.base_vector_ids}: {len(missing)} holdout questions have no vector "
            f"(first {missing[0]!r})"
        )
    chosen = np.asarray(vectors[[row[qid] for qid in holdout.ids]], dtype=np.float32)
    chosen /= np.maximum(np.linalg.norm(chosen, axis=1, keepdims=True), 1e-12)
    sample = np.random.default_rng(0).choice(
        len(holdout.ids), min(config.base_check_sample, len(holdout.ids)), replace=False
    )
    fresh = embed(encoder, [holdout.texts[i] for i in sample], "float32")
    agreement = float(np.min(np.einsum("ij,ij->i", fresh, chosen[sample])))
    if agreement < 0.999:
        raise DataFileError(
            f"{config.base_vectors}: the base model's vectors of {len(sample)} holdout "
            f"questions differ from the cached ones (lowest cosine {agreement:.4f}); they were "
            "computed with another model or settings"
        )
    logger.info(
        "base vectors of %d holdout questions from %s (a sample of %d matches, cosine >= %.5f)",
        len(holdout.ids),
        config.base_vectors,
        len(sample),
        agreement,
    )
    return chosen


def evaluate_dedup(
    encoder, holdout: Holdout, config: DedupTestConfig, *, base: bool = False
) -> dict:
    """Embed the holdout with ``encoder`` (or, for the ``base`` model with ``base_vectors``
    set, take the cached vectors), sweep each method, return the best-F1 points."""
    from sbert_pipeline.grouping.compare import MethodSettings, Ranker, sweep_methods
    from sbert_pipeline.grouping.pairs import IndexedPairs
    from sbert_pipeline.grouping.sweep import sweep_thresholds
    from sbert_pipeline.vectors.pairs_above import self_pairs_above

    start = time.perf_counter()
    cached = base and config.base_vectors is not None
    if cached:
        vectors = cached_base_vectors(encoder, holdout, config)
    else:
        vectors = embed(encoder, holdout.texts, config.compute_dtype)
    embed_seconds = time.perf_counter() - start
    start = time.perf_counter()
    a, b, scores = self_pairs_above(vectors, config.floor)
    pairs = IndexedPairs(a, b, scores)
    pairs_seconds = time.perf_counter() - start
    start = time.perf_counter()
    n = len(holdout.ids)
    settings = MethodSettings(method=config.methods[0], floor=config.floor)
    ranker = Ranker(settings, n, pairs, order_rank=np.arange(n, dtype=np.int64))
    thresholds = sweep_thresholds(config.floor, config.sweep_stop, config.sweep_step)
    sweeps = sweep_methods(
        settings, pairs, thresholds, ranker, holdout.labelled, methods=config.methods
    )
    out = {
        "questions": n,
        "labelled_pairs": holdout.labelled.to_json(),
        "pairs_at_floor": len(pairs),
        "compute_dtype": "float32 (cached)" if cached else config.compute_dtype,
        "vectors": config.base_vectors if cached else "embedded",
        "seconds": {
            "embed": round(embed_seconds, 1),
            "pairs": round(pairs_seconds, 1),
            "sweep": round(time.perf_counter() - start, 1),
        },
        "methods": {sweep.method: sweep.best().to_json() for sweep in sweeps},
    }
    for method, best in out["methods"].items():
        logger.info(
            "dedup %s on %d holdout questions: best F1 %.4f at T=%.2f (P %.3f, R %.3f, "
            "largest group %d)",
            method,
            n,
            best["f1"],
            best["threshold"],
            best["precision"],
            best["recall"],
            best["largest"],
        )
    return out


def dedup_metrics(config: DedupTestConfig, holdout: Holdout, before: dict, after: dict) -> dict:
    """The manifest's ``metrics.dedup``: settings, both evaluations and F1 changes."""
    change = {
        method: round(after["methods"][method]["f1"] - before["methods"][method]["f1"], 6)
        for method in after["methods"]
        if method in before.get("methods", {})
    }
    return {
        "holdout": holdout.source,
        "split": {
            "holdout_fraction": config.pairs.holdout_fraction,
            "split_seed": config.pairs.split_seed,
        },
        "questions_file": config.questions,
        "questions_left_out": holdout.questions_left_out,
        "floor": config.floor,
        "sweep": [config.floor, config.sweep_stop, config.sweep_step],
        "settings": "sbert dedup defaults: central ranking, star radius T - 0.10",
        "before": before or None,
        "after": after,
        "f1_change": change,
    }


def card_lines(metrics: dict) -> list[str]:
    """Model-card lines for ``metrics.dedup``."""
    after = metrics["after"]
    before = metrics["before"] or {"methods": {}}
    lines = [
        "## Dedup on held-out duplicates",
        "",
        f"{after['questions']:,} questions of the holdout part of `{metrics['holdout']}` "
        f"(a split by connected components of the labelled-pair graph, holdout fraction "
        f"{metrics['split']['holdout_fraction']}, seed {metrics['split']['split_seed']}; no "
        "holdout question or duplicate group was trained on), every pair with cosine >= "
        f"{metrics['floor']} found exactly ({after['compute_dtype']} compute), grouped with "
        f'{metrics["settings"]}; pair precision / recall / F1 of "both questions end in one '
        f"group\" on the holdout's {after['labelled_pairs']['evaluated']:,} labelled pairs, at "
        "each model's best-F1 threshold.",
        "",
        "| method | model | threshold | precision | recall | F1 | largest group |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, tuned in after["methods"].items():
        for name, point in (("base", before["methods"].get(method)), ("fine-tuned", tuned)):
            if point is None:
                continue
            lines.append(
                f"| {method} | {name} | {point['threshold']:.2f} | {point['precision']:.4f} | "
                f"{point['recall']:.4f} | {point['f1']:.4f} | {point['largest']:,} |"
            )
    for method, delta in metrics["f1_change"].items():
        lines.append(f"\n{method}: F1 {delta:+.4f} over the base model.")
    lines.append("")
    return lines
