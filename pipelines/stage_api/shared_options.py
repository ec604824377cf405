"""Options several stages share, declared once so each is spelled, checked and documented the
same way wherever it appears (``--output``, ``--overwrite``, ``--verify``, ``--seed``, the Beam
options, the fields of your own vectors). Beam-free.

A stage's ``Options`` lists them as fields (``output: str = output_option()``) or inherits
:class:`ExternalVectorOptions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from sbert_pipeline.io.resources import AUTO_SHARE, MemoryBudget, resolve_budget
from sbert_pipeline.stage_api.options import BEAM_FIELD, OptionError, StageOptions, option

EXTERNAL_GROUP = "external vectors"
EXTERNAL_HELP = (
    "an --embeddings path that sbert embed did not write is read as a Parquet dataset (a "
    "folder of *.parquet files, one file or a glob) with these columns"
)


def output_option(help: str = "output directory") -> Any:
    """``--output DIR`` (required)."""
    return option(help=help, required=True, metavar="DIR")


def overwrite_option() -> Any:
    """``--overwrite``: replace an existing output (only one this project wrote)."""
    return option(False, "replace an existing output")


def verify_option(what: str = "the input folders' files") -> Any:
    """``--verify`` / ``--no-verify``: compare ``what`` with the digest their manifest records
    before using them (on by default; off, only their sizes and the listing are checked)."""
    return option(
        True,
        f"check {what} against the digest their manifest records (--no-verify: only their "
        "sizes; default on)",
    )


def memory_budget_option() -> Any:
    """``--memory-budget SIZE|auto``: the memory the whole process may use (default ``auto``);
    read with :func:`checked_memory_budget`."""
    return option(
        "auto",
        "memory the whole process may use, e.g. 4GB; auto (default): "
        f"{AUTO_SHARE:.0%} of what is available; a run that needs more is refused first",
        metavar="SIZE",
    )


def checked_memory_budget(value: str) -> MemoryBudget:
    """The budget ``--memory-budget value`` asks for, or an :class:`OptionError` naming the
    option (for a stage's ``check()``, so a bad size fails before any input is read)."""
    try:
        return resolve_budget(value)
    except ValueError as err:
        raise OptionError("memory_budget", str(err)) from None


def seed_option(help: str, *, advanced: bool = True) -> Any:
    """``--seed N`` (default 0): the stage's random choices (``help`` says which) repeat."""
    return option(0, help, advanced=advanced)


def kmeans_sample_option(scope: str, per_cluster: int, min_sample: int) -> Any:
    """``--sample N`` of a k-means fit on a sample of the rows (``sbert_pipeline.vectors.sampling.
    sample_size`` reads it); ``scope`` starts the help, e.g. ``"clustered: "``."""
    return option(
        help=f"{scope}rows the k-means fit uses (default {per_cluster} per cluster, at least "
        f"{min_sample:,}, at most 2 GiB of vectors)",
        advanced=True,
    )


def kmeans_iterations_option() -> Any:
    """``--iterations N`` of a k-means fit (default 20)."""
    return option(20, "k-means iterations, at most", advanced=True)


def beam_options_option() -> Any:
    """The Beam pipeline options of a stage that runs pipelines: a list of flags as Beam spells
    them (``["--runner=DataflowRunner", "--project=p"]``) or a ``PipelineOptions``. On the
    command line, every flag that is not the stage's own."""
    return option(
        (),
        "Beam pipeline options: a list of flags or a PipelineOptions",
        in_cli=False,
    )


@dataclass(frozen=True)
class ExternalVectorOptions(StageOptions):
    """The fields of an input that ``sbert embed`` did not make (a Parquet dataset of your own
    vectors). A subclass that renames options of its own lists these renames too."""

    RENAMED: ClassVar[Mapping[str, str]] = {
        "embedding_column": "embedding_field",
        "id_column": "id_field",
        "text_column": "text_field",
    }

    embedding_field: str | None = option(
        help="the vector column: a list or fixed-size list of float16, float32 or float64",
        metavar="FIELD",
        group=EXTERNAL_GROUP,
        group_help=EXTERNAL_HELP,
    )
    id_field: str | None = option(
        help="the column of unique ids", metavar="FIELD", group=EXTERNAL_GROUP
    )
    text_field: str | None = option(
        help="an optional text column", metavar="FIELD", group=EXTERNAL_GROUP
    )
    model_name: str | None = option(
        help="the model recorded as 'external: NAME' (default the dataset path); inputs of "
        "different models are refused together",
        metavar="NAME",
        group=EXTERNAL_GROUP,
    )


__all__ = [
    "BEAM_FIELD",
    "EXTERNAL_GROUP",
    "EXTERNAL_HELP",
    "ExternalVectorOptions",
    "beam_options_option",
    "kmeans_iterations_option",
    "kmeans_sample_option",
    "output_option",
    "overwrite_option",
    "seed_option",
    "verify_option",
]
