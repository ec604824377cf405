"""``sbert eval sts``: STS correlations (x 100) of a model on a file of scored sentence pairs."""

from __future__ import annotations

import argparse

from sbert_pipeline.jobs.parsers.eval import add_field, eval_parser, evaluate, pair_file


def add_parser(subparsers) -> None:
    """Register ``eval sts`` on the ``eval`` sub-command's subparsers."""
    summary = "Spearman/Pearson x100 of similarity vs gold scores"
    description = (
        "Spearman and Pearson correlations (x 100) between a model's similarities and the gold "
        "scores of a file of sentence pairs, for cosine, Manhattan, Euclidean and dot product."
    )
    parser = eval_parser(subparsers, "sts", summary, description, main)
    add_field(parser, "score", "score", "column with the gold score")


def main(args: argparse.Namespace) -> int:
    """Run the evaluation and print the metrics."""
    from sbert_core.evaluation.evaluators import (  # loads torch: only when run
        SIMILARITIES,
        STSEvaluator,
    )

    evaluator = STSEvaluator.from_file(args.data, score_col=args.score_field, **pair_file(args))
    result = evaluate(evaluator, args)
    if result is None:  # printed as JSON
        return 0
    model_id, metrics = result
    print(f"model: {model_id}\ndata:  {args.data} ({metrics['n_pairs']} pairs)")
    print(f"{'similarity':<12}{'spearman':>10}{'pearson':>10}")
    for name in SIMILARITIES:
        print(f"{name:<12}{metrics[name + '_spearman']:>10.2f}{metrics[name + '_pearson']:>10.2f}")
    return 0
