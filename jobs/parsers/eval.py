"""What ``sbert eval sts`` and ``sbert eval pairs`` share: their parser and how they run the
evaluator; imports no torch (the model loads only when an evaluation runs)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from sbert_pipeline.jobs.model_flags import add_model_arguments, encoder_settings
from sbert_pipeline.jobs.parsers import HelpFormatter, plain_text


def eval_parser(
    subparsers, name: str, summary: str, doc: str | None, handler: Callable[..., int]
) -> argparse.ArgumentParser:
    """Register ``sbert eval NAME``: the model options, then a file of sentence pairs (``--data``,
    ``--s1-col``, ``--s2-col``, ``--format``) and ``--json``; the caller adds its own columns.

    Args:
        subparsers: the ``eval`` command's subparsers.
        name: the evaluation's name; ``summary`` its line in ``sbert eval --help``.
        doc: its module docstring, shown as the description.
        handler: runs it (``handler(args)`` returns the exit status).
    """
    parser = subparsers.add_parser(
        name, help=summary, description=plain_text(doc or ""), formatter_class=HelpFormatter
    )
    add_model_arguments(parser, old_dtype_flag=True)
    parser.add_argument("--data", required=True, help="TSV/CSV/JSONL/Parquet file, gzip allowed")
    parser.add_argument("--s1-col", default="sentence1", help="column with the first sentence")
    parser.add_argument("--s2-col", default="sentence2", help="column with the second sentence")
    parser.add_argument("--format", default=None, help="file format if the extension does not tell")
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON")
    parser.set_defaults(handler=handler)
    return parser


def pair_file(args: argparse.Namespace) -> dict[str, Any]:
    """The sentence-pair file options of :func:`eval_parser` as keyword arguments of an
    evaluator's ``from_file`` (the file itself is ``args.data``)."""
    return {"s1_col": args.s1_col, "s2_col": args.s2_col, "fmt": args.format}


def evaluate(evaluator: Callable[..., dict], args: argparse.Namespace) -> tuple[str, dict] | None:
    """Run ``evaluator`` on the model the options name, with their encode settings.

    Returns:
        None when ``--json`` was given (the metrics are printed as one JSON object with the model
        and the data file); else the model id and the metrics, for the command's table.
    """
    settings = encoder_settings(args)
    encoder = settings.load()
    metrics = evaluator(encoder, **settings.encode_kwargs())
    if args.json:
        print(json.dumps({"model": encoder.model_id, "data": str(args.data), **metrics}, indent=2))
        return None
    return encoder.model_id, metrics
