"""What ``sbert eval sts`` and ``sbert eval pairs`` share: their parser and how they run the
evaluator; imports no torch (the model loads only when an evaluation runs)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from sbert_pipeline.jobs.model_flags import (
    DeprecatedAlias,
    add_model_arguments,
    settings_from_flags,
)
from sbert_pipeline.jobs.parsers import HelpFormatter
from sbert_pipeline.jobs.parsers.stage_help import Switch


def eval_parser(
    subparsers, name: str, summary: str, description: str, handler: Callable[..., int]
) -> argparse.ArgumentParser:
    """Register ``sbert eval NAME``: the model options, then a file of sentence pairs (``--data``,
    ``--s1-field``, ``--s2-field``, ``--format``) and ``--json``; the caller adds its own
    columns (:func:`add_field`).

    Args:
        subparsers: the ``eval`` command's subparsers.
        name: the evaluation's name; ``summary`` its line in ``sbert eval --help``.
        description: its description in ``--help``, for users.
        handler: runs it (``handler(args)`` returns the exit status).
    """
    parser = subparsers.add_parser(
        name,
        help=summary,
        description=f"{description}\n\nMore: docs/commands.md#eval",
        usage=f"sbert eval {name} --data FILE [options]",
        formatter_class=HelpFormatter,
    )
    add_model_arguments(parser, old_dtype_flag=True)
    parser.add_argument(
        "--data", required=True, metavar="FILE", help="TSV/CSV/JSONL/Parquet file, gzip allowed"
    )
    add_field(parser, "s1", "sentence1", "column with the first sentence")
    add_field(parser, "s2", "sentence2", "column with the second sentence")
    parser.add_argument("--format", default=None, help="file format if the extension does not tell")
    parser.add_argument("--json", action=Switch, default=False, help="print the metrics as JSON")
    parser.set_defaults(handler=handler)
    return parser


def pair_file(args: argparse.Namespace) -> dict[str, Any]:
    """The sentence-pair file options of :func:`eval_parser` as keyword arguments of an
    evaluator's ``from_file`` (the file itself is ``args.data``)."""
    return {"s1_col": args.s1_field, "s2_col": args.s2_field, "fmt": args.format}


def add_field(parser: argparse.ArgumentParser, name: str, default: str, help: str) -> None:
    """``--NAME-field FIELD`` (a column of the pairs file), and its old spelling ``--NAME-col``
    with a deprecation line."""
    new = f"--{name}-field"
    dest = f"{name}_field"
    parser.add_argument(new, dest=dest, default=default, metavar="FIELD", help=help)
    parser.add_argument(f"--{name}-col", dest=dest, action=DeprecatedAlias, new=new)


def evaluate(evaluator: Callable[..., dict], args: argparse.Namespace) -> tuple[str, dict] | None:
    """Run ``evaluator`` on the model the options name, with their encode settings.

    Returns:
        None when ``--json`` was given (the metrics are printed as one JSON object with the model
        and the data file); else the model id and the metrics, for the command's table.
    """
    settings = settings_from_flags(args)
    encoder = settings.load()
    metrics = evaluator(encoder, **settings.encode_kwargs())
    if args.json:
        print(json.dumps({"model": encoder.model_id, "data": str(args.data), **metrics}, indent=2))
        return None
    return encoder.model_id, metrics
