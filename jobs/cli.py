"""The ``sbert`` command line: one entry point, one sub-command per job."""

from __future__ import annotations

import argparse
import logging
import sys

from jobs import encode_file, eval_sts
from sbert_core import __version__
from sbert_core.errors import DataFileError, ModelLoadError

# Errors a user can fix from the message alone: printed as one line, exit status 2.
USER_ERRORS = (
    ModelLoadError,
    DataFileError,
    FileExistsError,
    FileNotFoundError,
    ValueError,
    TypeError,
)


def build_parser() -> argparse.ArgumentParser:
    """The full ``sbert`` parser with every sub-command registered."""
    parser = argparse.ArgumentParser(prog="sbert", description="Sentence-BERT batch jobs.")
    parser.add_argument("--version", action="version", version=f"sbert-pipeline {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    encode_file.add_parser(commands)
    evaluate = commands.add_parser("eval", help="evaluate a model").add_subparsers(
        dest="evaluation", required=True, metavar="EVALUATION"
    )
    eval_sts.add_parser(evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.handler(args)
    except USER_ERRORS as err:
        print(f"sbert: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
