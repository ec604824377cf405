"""Option set-ups and start-up steps that the Beam jobs share, written once so that an option
that means the same thing in several commands is spelled, checked and documented the same way.

The job parsers in ``jobs/parsers/`` use the option helpers, so this module loads no Beam."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipelines.io.output_dir import OutputLayout
    from pipelines.io.staged_output import StagedOutput


def add_embeddings_inputs(parser: argparse.ArgumentParser, together: str) -> None:
    """``--embeddings DIR [DIR ...]`` (one model; ``together`` says what is done with them) and
    ``--output DIR``."""
    parser.add_argument(
        "--embeddings",
        required=True,
        nargs="+",
        action="extend",
        help=f"embeddings output directories (one model; several are {together} together)",
    )
    parser.add_argument("--output", required=True, help="output directory")


def add_external_vectors(parser: argparse.ArgumentParser) -> None:
    """``--embedding-column``, ``--id-column``, ``--text-column`` and ``--model-name``: read an
    input without our manifest as a Parquet dataset of vectors ``sbert embed`` did not make."""
    group = parser.add_argument_group(
        "external vectors",
        "an --embeddings path without _manifest.json is read as a Parquet dataset (a folder of "
        "*.parquet files, one file or a glob; files in name order) of these columns",
    )
    group.add_argument(
        "--embedding-column",
        default=None,
        help="the vector column: a list or fixed-size list of float16, float32 or float64",
    )
    group.add_argument("--id-column", default=None, help="the column of unique ids")
    group.add_argument("--text-column", default=None, help="an optional text column")
    group.add_argument(
        "--model-name",
        default=None,
        help="the model recorded as 'external: NAME' (default the dataset path); inputs of "
        "different models are refused together",
    )


def add_precision(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--precision auto|bfloat16|float32`` of a candidate pass whose answer stays fp32."""
    parser.add_argument(
        "--precision", default="auto", choices=["auto", "bfloat16", "float32"], help=help_text
    )


def add_kmeans_fit(
    parser: argparse.ArgumentParser, scope: str, per_cluster: int, min_sample: int
) -> None:
    """``--sample N`` and ``--iterations N`` of a k-means fit on a sample of the rows
    (``pipelines.vectors.sampling.sample_size`` reads ``--sample``; ``scope`` starts the help,
    e.g. ``"clustered: "``)."""
    parser.add_argument(
        "--sample",
        type=int,
        default=None,
        help=f"{scope}rows the k-means fit uses (default {per_cluster} per cluster, at least "
        f"{min_sample:,}, at most 2 GiB of vectors; clamped to the number of rows)",
    )
    parser.add_argument("--iterations", type=int, default=20, help="k-means iterations, at most")


def add_seed(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--seed N`` (default 0): the job's random choices (``help_text`` says which) are the
    same on every run with the same seed."""
    parser.add_argument("--seed", type=int, default=0, help=help_text)


def add_overwrite(parser: argparse.ArgumentParser) -> None:
    """``--overwrite``: replace an existing output (only one this project wrote)."""
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")


def add_verify(parser: argparse.ArgumentParser, what: str = "the input folders' files") -> None:
    """``--verify`` / ``--no-verify``: compare ``what`` with the digest their manifest records
    before using them (on by default; off, only their sizes and the listing are checked)."""
    parser.add_argument(
        "--verify",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"check {what} against the digest their manifest records before reading them "
        "(--no-verify checks only their sizes; default on)",
    )


def job_output(
    command: str, output: str, overwrite: bool, argv: list[str] | None, layout: OutputLayout
) -> StagedOutput:
    """The staged output of a job run: refused before any work when it exists (without
    ``overwrite``) or is not this project's; the manifest records the command and its argv."""
    # imported here: jobs/parsers/ use this module, and --help loads no Beam
    from pipelines.io.staged_output import prepare_output

    return prepare_output(
        output,
        overwrite=overwrite,
        job={"command": command, "argv": argv or sys.argv[1:]},
        layout=layout,
    )
