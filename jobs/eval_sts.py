"""``sbert eval sts``: STS correlations (x 100) of a model on a file of scored sentence pairs."""

from __future__ import annotations

import argparse
import json

from jobs.model_options import add_model_arguments, encoder_settings
from jobs.parsers import HelpFormatter, plain_text


def add_parser(subparsers) -> None:
    """Register ``eval sts`` on the ``eval`` sub-command's subparsers."""
    parser = subparsers.add_parser(
        "sts",
        help="Spearman/Pearson x100 of similarity vs gold scores",
        description=plain_text(__doc__),
        formatter_class=HelpFormatter,
    )
    add_model_arguments(parser, old_dtype_flag=True)
    parser.add_argument("--data", required=True, help="TSV/CSV/JSONL/Parquet file, gzip allowed")
    parser.add_argument("--score-col", default="score", help="column with the gold score")
    parser.add_argument("--s1-col", default="sentence1", help="column with the first sentence")
    parser.add_argument("--s2-col", default="sentence2", help="column with the second sentence")
    parser.add_argument("--format", default=None, help="file format if the extension does not tell")
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    """Run the evaluation and print the metrics."""
    from sbert_core.evaluation import SIMILARITIES, STSEvaluator  # loads torch: only when run

    evaluator = STSEvaluator.from_file(
        args.data, score_col=args.score_col, s1_col=args.s1_col, s2_col=args.s2_col, fmt=args.format
    )
    settings = encoder_settings(args)
    encoder = settings.load()
    metrics = evaluator(encoder, **settings.encode_kwargs())
    if args.json:
        print(json.dumps({"model": encoder.model_id, "data": str(args.data), **metrics}, indent=2))
        return 0
    print(f"model: {encoder.model_id}\ndata:  {args.data} ({metrics['n_pairs']} pairs)")
    print(f"{'similarity':<12}{'spearman':>10}{'pearson':>10}")
    for name in SIMILARITIES:
        print(f"{name:<12}{metrics[name + '_spearman']:>10.2f}{metrics[name + '_pearson']:>10.2f}")
    return 0
