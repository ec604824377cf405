"""``sbert eval pairs``: average precision and best F1 of a model on labelled sentence pairs."""

from __future__ import annotations

import argparse

from sbert_pipeline.jobs.parsers.eval import add_field, eval_parser, evaluate, pair_file


def add_parser(subparsers) -> None:
    """Register ``eval pairs`` on the ``eval`` sub-command's subparsers."""
    summary = "average precision / best F1 on labelled pairs"
    description = (
        "Average precision and best F1 (with its threshold) of a model's similarities on a "
        "file of labelled sentence pairs, for cosine, Manhattan, Euclidean and dot product."
    )
    parser = eval_parser(subparsers, "pairs", summary, description, main)
    add_field(parser, "label", "label", "0/1 labels, or scores (see --positive-min)")
    parser.add_argument(
        "--positive-min",
        type=float,
        default=None,
        metavar="X",
        help="read --label-field as a score: pairs scoring at least this are positives "
        "(e.g. 4 for STSb)",
    )


def main(args: argparse.Namespace) -> int:
    """Run the evaluation and print the metrics."""
    from sbert_core.evaluation.evaluators import (
        SIMILARITIES,
        SimilarityClassificationEvaluator,
    )  # loads torch: only when run

    evaluator = SimilarityClassificationEvaluator.from_file(
        args.data, label_col=args.label_field, positive_min=args.positive_min, **pair_file(args)
    )
    result = evaluate(evaluator, args)
    if result is None:  # printed as JSON
        return 0
    model_id, metrics = result
    print(
        f"model: {model_id}\ndata:  {args.data} "
        f"({metrics['n_pairs']} pairs, {metrics['n_positive']} positive)"
    )
    print(f"{'similarity':<12}{'AP':>8}{'F1':>8}{'P':>8}{'R':>8}{'threshold':>12}")
    for name in SIMILARITIES:
        print(
            f"{name:<12}{metrics[name + '_ap']:>8.2f}{metrics[name + '_f1']:>8.2f}"
            f"{metrics[name + '_precision']:>8.2f}{metrics[name + '_recall']:>8.2f}"
            f"{metrics[name + '_f1_threshold']:>12.4f}"
        )
    return 0
