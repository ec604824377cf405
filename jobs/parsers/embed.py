"""Options of ``sbert embed`` (the job is ``jobs/embed.py``); imports no torch and no Beam."""

from __future__ import annotations

import argparse

from jobs.job_options import add_overwrite
from jobs.model_options import add_model_arguments
from jobs.parsers import command_parser
from pipelines.io.corpus_reader import (
    DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_MAX_RECORD_LINES,
    ON_BAD_FILE_CHOICES,
)


def build_parser() -> argparse.ArgumentParser:
    """Job options; anything not listed here is passed on to Beam's ``PipelineOptions``."""
    parser = command_parser("sbert embed", "jobs.embed")
    parser.add_argument(
        "--input", required=True, help="glob of corpus files on any Beam filesystem"
    )
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--format", default=None, choices=["txt", "jsonl", "csv", "tsv", "parquet"])
    parser.add_argument(
        "--text-field", default="text", help="field/column with the text (default: text)"
    )
    parser.add_argument(
        "--id-field", default=None, help="field with ids (default: derived from file:row)"
    )
    parser.add_argument(
        "--keep-fields", default="", help="comma-separated fields copied to the output"
    )
    parser.add_argument(
        "--keep-text", action="store_true", help="store the text next to the vector"
    )
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "float16"], help="stored dtype"
    )
    parser.add_argument(
        "--max-error-rate",
        type=float,
        default=1.0,
        help="fail (no manifest) if a larger fraction of rows is rejected (default 1.0: never)",
    )
    parser.add_argument(
        "--max-record-bytes",
        type=int,
        default=DEFAULT_MAX_RECORD_BYTES,
        help="bytes of one row at most (the raw line(s)); longer rows are rejected",
    )
    parser.add_argument(
        "--max-record-lines",
        type=int,
        default=DEFAULT_MAX_RECORD_LINES,
        help="lines one quoted CSV field may span; past it the quote is taken for a stray one "
        "and only its first line is rejected",
    )
    parser.add_argument(
        "--on-bad-file",
        default="fail",
        choices=ON_BAD_FILE_CHOICES,
        help="a damaged input file (truncated or corrupt .gz/.bz2/.parquet): fail the job, "
        "naming it (default), or skip it as one rejected row after the rows read before the "
        "damage",
    )
    parser.add_argument(
        "--min-batch-size",
        type=int,
        default=4096,
        # Large batches let the encoder sort by token length across many texts: at 256 the
        # pipeline ran at 0.82x the raw encoder on 20k texts, at 4096-8192 at 0.97x.
        help="records per inference call, min",
    )
    parser.add_argument(
        "--max-batch-size", type=int, default=8192, help="records per inference call, max"
    )
    parser.add_argument(
        "--batching",
        default="auto",
        choices=["auto", "bundle", "grouped"],
        help="bundle: Beam's BatchElements; grouped: GroupByKey buckets and sharded writes "
        "(auto: grouped on the Dask runner, which drops finish_bundle output)",
    )
    parser.add_argument(
        "--exact-dedup",
        action="store_true",
        help="embed each distinct normalised text once (NFKC, casefold, whitespace and "
        "punctuation collapsed); the other rows with that text get its vector and its id in a "
        "copy_of column, and dedup puts them in its group",
    )
    parser.add_argument(
        "--allow-all-rejected",
        action="store_true",
        help="publish a run in which every row was rejected (default: such a run fails)",
    )
    parser.add_argument(
        "--accelerator",
        default=None,
        help="GPUs for the embed step only, as Beam's accelerator resource hint (Dataflow right "
        "fitting: the other steps keep the job's machine type), e.g. "
        "'type:nvidia-l4;count:1;machine_type:g2-standard-8;install-nvidia-driver:5xx' "
        "(default: none; local runners ignore it)",
    )
    add_overwrite(parser)
    add_model_arguments(parser, normalize=True)
    return parser
