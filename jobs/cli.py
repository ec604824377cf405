"""The ``sbert`` command line: one entry point, one sub-command per job."""

from __future__ import annotations

import argparse
import logging
import sys

from jobs import embed, encode_file, eval_sts, submit
from jobs.embed import JobFailedError
from sbert_core import __version__
from sbert_core.errors import DataFileError, ModelLoadError

BEAM_COMMANDS = {"embed": embed, "submit": submit}
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
    for name, module in BEAM_COMMANDS.items():
        # Beam jobs parse their own arguments (and pass the rest to PipelineOptions).
        commands.add_parser(name, help=module.__doc__.splitlines()[0], add_help=False)
    encode_file.add_parser(commands)
    evaluate = commands.add_parser("eval", help="evaluate a model").add_subparsers(
        dest="evaluation", required=True, metavar="EVALUATION"
    )
    eval_sts.add_parser(evaluate)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = bool(argv) and argv[0] in {"-v", "--verbose"}
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    command = argv[1] if verbose and len(argv) > 1 else (argv[0] if argv else None)
    try:
        if command in BEAM_COMMANDS:
            return BEAM_COMMANDS[command].main(argv[argv.index(command) + 1 :])
        args = build_parser().parse_args(argv)
        return args.handler(args)
    except USER_ERRORS as err:
        print(f"sbert: error: {err}", file=sys.stderr)
        return 2
    except JobFailedError as err:
        print(f"sbert: job failed: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
