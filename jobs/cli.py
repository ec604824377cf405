"""The ``sbert`` command line: one entry point, one sub-command per job.

Job modules are imported only when their command runs, after logging is set up, so that
``sbert --help`` is quick and import-time chatter from optional Beam I/O modules is filtered.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from jobs.errors import JobFailedError
from sbert_core import __version__
from sbert_core.errors import DataFileError, ModelLoadError

# Commands that parse their own arguments and hand the rest to Beam's PipelineOptions.
BEAM_COMMANDS = {
    "cluster": ("jobs.cluster", "cluster embeddings: k-means or communities, with summaries"),
    "dedup": ("jobs.dedup", "duplicate groups from similar pairs, with a report"),
    "embed": ("jobs.embed", "embed a corpus into Parquet (Beam pipeline)"),
    "finetune": ("jobs.finetune", "fine-tune a model on labelled pairs or triplets"),
    "index": ("jobs.index", "build a FAISS index from embeddings, tuned to a recall target"),
    "pairs": ("jobs.pairs", "all-pairs top-k neighbours and similar pairs of embeddings"),
    "run": ("jobs.run", "run a whole job (embed, index, cluster, pairs, dedup) from a config"),
    "search": ("jobs.search", "nearest neighbours of query texts in an index"),
    "submit": ("jobs.submit", "run a job from a YAML config on Dataflow, Spark or Flink"),
}
# Errors a user can fix from the message alone: printed as one line, exit status 2.
USER_ERRORS = (
    ModelLoadError,
    DataFileError,
    FileExistsError,
    FileNotFoundError,
    ValueError,
    TypeError,
)
# Beam's optional BigQuery client warns at import time when its extra is not installed;
# nothing here uses BigQuery, so the warning only confuses.
_IGNORED_LOG_PREFIXES = ("apitools not found",)
_BEAM_DOFN_ERROR_LOGGER = "apache_beam.runners.common"


def build_parser() -> argparse.ArgumentParser:
    """The full ``sbert`` parser with every sub-command registered."""
    from jobs import encode_file, eval_pairs, eval_sts

    parser = argparse.ArgumentParser(prog="sbert", description="Sentence-BERT batch jobs.")
    parser.add_argument("--version", action="version", version=f"sbert-pipeline {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, summary) in BEAM_COMMANDS.items():
        commands.add_parser(name, help=summary, add_help=False)
    encode_file.add_parser(commands)
    evaluate = commands.add_parser("eval", help="evaluate a model").add_subparsers(
        dest="evaluation", required=True, metavar="EVALUATION"
    )
    eval_sts.add_parser(evaluate)
    eval_pairs.add_parser(evaluate)
    return parser


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(lambda record: not str(record.msg).startswith(_IGNORED_LOG_PREFIXES))
        if not verbose:
            # Beam logs an exception raised in a DoFn with its traceback before the runner
            # re-raises it; the job then reports it in one line (or, if unexpected, in full).
            handler.addFilter(lambda record: record.name != _BEAM_DOFN_ERROR_LOGGER)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = bool(argv) and argv[0] in {"-v", "--verbose"}
    _configure_logging(verbose)
    rest = argv[1:] if verbose else argv
    try:
        if rest and rest[0] in BEAM_COMMANDS:
            module = importlib.import_module(BEAM_COMMANDS[rest[0]][0])
            return module.main(rest[1:])
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
