"""Options of the embed stage (``sbert embed``, ``sbert run``'s ``embed:``, ``embed.Options``).

Beam-free: the command line is generated from these fields (``jobs/options_cli.py``); the class
docstring is the command's description in ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sbert_pipeline.embed.rows_input import check_rows, is_in_memory
from sbert_pipeline.io.output_names import refuse_output_folder
from sbert_pipeline.io.path_relations import overlap_error
from sbert_pipeline.io.record_limits import (
    COPY_OF,
    DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_MAX_RECORD_LINES,
)
from sbert_pipeline.stage_api.model_options import ModelOptions, encoder_settings
from sbert_pipeline.stage_api.options import OptionError, at_least, in_range, option
from sbert_pipeline.stage_api.shared_options import (
    beam_options_option,
    checked_memory_budget,
    memory_budget_option,
    output_option,
    overwrite_option,
)

if TYPE_CHECKING:
    from sbert_pipeline.io.corpus_reader import CorpusSpec
    from sbert_pipeline.io.resources import MemoryBudget

    from sbert_core.inference.encoder_settings import EncoderSettings

# The columns every embeddings output has (pipelines/embed/sinks.py): --keep-fields may not
# name them.
OUTPUT_COLUMNS = frozenset({"id", "embedding", "n_tokens", "truncated", "text"})


def field_names(value: str) -> tuple[str, ...]:
    """A comma-separated list of field names (``a,b``), empty names left out."""
    return tuple(name for name in value.split(",") if name)


@dataclass(frozen=True)
class Options(ModelOptions):
    """Embed a corpus (text, JSONL, CSV, TSV or Parquet files, gzip allowed) into Parquet files
    of vectors with a Beam pipeline. Rows that cannot be read are set aside in _errors/ and
    counted; the output is published with its manifest only when the run succeeds."""

    # ``input`` is kept apart from the output by check(): rows in memory name no path.
    INPUT_OPTIONS = ("model",)
    DOCS = ("docs/models.md", "docs/incremental.md", "docs/distributed.md")

    # From Python also the rows themselves (``rows_input.py``): a list of texts, a pandas
    # Series or DataFrame, a pyarrow Table.
    input: str | tuple[str, ...] | Any = option(
        help="glob of corpus files on any Beam filesystem", required=True, metavar="GLOB"
    )
    output: str = output_option()
    format: Literal["txt", "jsonl", "csv", "tsv", "parquet"] | None = option(
        help="input format (default: from the file names)"
    )
    text_field: str = option("text", "field/column with the text (default: text)", metavar="FIELD")
    id_field: str | None = option(
        help="field with ids (default: derived from file:row)", metavar="FIELD"
    )
    keep_fields: tuple[str, ...] = option(
        (),
        "comma-separated fields copied to the output",
        cli={"type": field_names},
        metavar="FIELDS",
    )
    keep_text: bool = option(False, "store the text next to the vector")
    dtype: Literal["float32", "float16"] = option("float32", "stored dtype")
    max_error_rate: float = option(
        1.0,
        "fail (no manifest) if a larger fraction of rows is rejected (default 1.0: never)",
        advanced=True,
    )
    max_record_bytes: int = option(
        DEFAULT_MAX_RECORD_BYTES,
        "bytes of one row at most (the raw line(s)); longer rows are rejected",
        advanced=True,
    )
    max_record_lines: int = option(
        DEFAULT_MAX_RECORD_LINES,
        "lines one quoted CSV field may span; past it the quote is taken for a stray one and "
        "only its first line is rejected",
        advanced=True,
    )
    on_bad_file: Literal["fail", "skip"] = option(
        "fail",
        "a damaged input file (truncated or corrupt .gz/.bz2/.parquet): fail the job, naming "
        "it (default), or skip it as one rejected row after the rows read before the damage",
        advanced=True,
    )
    # Large batches let the encoder sort by token length across many texts: at 256 the
    # pipeline ran at 0.82x the raw encoder on 20k texts, at 4096-8192 at 0.97x.
    min_batch_size: int = option(4096, "records per inference call, min", advanced=True)
    max_batch_size: int = option(8192, "records per inference call, max", advanced=True)
    batching: Literal["auto", "bundle", "grouped"] = option(
        "auto",
        "bundle: Beam's BatchElements; grouped: GroupByKey buckets and sharded writes (auto: "
        "grouped on the Dask runner, which drops finish_bundle output)",
        advanced=True,
    )
    exact_dedup: bool = option(
        False,
        "embed each distinct normalised text once; the other rows with that text get its vector "
        "and its id in a copy_of column, and dedup puts them in its group",
    )
    allow_all_rejected: bool = option(
        False,
        "publish a run in which every row was rejected (default: such a run fails)",
        advanced=True,
    )
    accelerator: str | None = option(
        help="GPUs for the embed step only, as Beam's accelerator resource hint (Dataflow right "
        "fitting: the other steps keep the job's machine type), e.g. "
        "'type:nvidia-l4;count:1;machine_type:g2-standard-8;install-nvidia-driver:5xx' "
        "(default: none; local runners ignore it)",
        metavar="HINT",
        advanced=True,
    )
    incremental: bool = option(
        False,
        "reuse the previous version of --output: only new and changed input files are embedded, "
        "rows of removed files dropped (not with --exact-dedup)",
    )
    memory_budget: str = memory_budget_option()
    overwrite: bool = overwrite_option()
    beam_options: Any = beam_options_option()

    def check(self) -> None:
        """Refuse bad values before any input is read or any output touched."""
        super().check()
        in_range("max_error_rate", self.max_error_rate, 0.0, 1.0)
        self.budget()
        at_least("max_record_bytes", self.max_record_bytes, 1)
        at_least("max_record_lines", self.max_record_lines, 1)
        # Before anything lists it: listing / or $HOME alone walks much of the disk.
        try:
            refuse_output_folder(self.output, "--output")
        except ValueError as err:
            raise OptionError("output", str(err).removeprefix("--output: ")) from None
        reserved = (OUTPUT_COLUMNS | ({COPY_OF} if self.exact_dedup else set())) & set(
            self.keep_fields
        )
        if reserved:
            raise OptionError(
                "keep_fields", f"may not include output columns: {', '.join(sorted(reserved))}"
            )
        if self.incremental and self.exact_dedup:
            # A copy's representative may sit in another file: files could not be kept or
            # dropped on their own.
            raise OptionError(
                "incremental",
                "cannot be combined with --exact-dedup (a row's copy_of may name a row of "
                "another input file, so files cannot be kept or re-embedded one by one)",
            )
        if self.min_batch_size < 1 or self.max_batch_size < self.min_batch_size:
            raise OptionError(
                "min_batch_size",
                f"must be at least 1 and at most --max-batch-size ({self.max_batch_size}), "
                f"got {self.min_batch_size}",
            )
        self._check_input()

    def _check_input(self) -> None:
        """A glob apart from the output, or rows in memory that can be read (errors in
        Python's words: only Python passes rows)."""
        if not is_in_memory(self.input):
            message = self.input and overlap_error(self.output, "--input", self.input)
            if message:
                raise OptionError("output", message)
            return
        check_rows(self.input, self.text_field, self.id_field, self.keep_fields)
        if self.incremental:
            raise ValueError(
                "incremental: needs input files (rows in memory are embedded whole each run)"
            )
        if self.format not in (None, "parquet"):
            raise ValueError(f"format: not for rows in memory (got {self.format!r})")

    def budget(self) -> MemoryBudget:
        """``memory_budget`` resolved (``auto``: a share of the memory available now).

        Raises:
            OptionError: not a size, naming --memory-budget.
        """
        return checked_memory_budget(self.memory_budget)

    def corpus_spec(self) -> CorpusSpec:
        """How the corpus files are read."""
        from sbert_pipeline.io.corpus_reader import CorpusSpec  # pyarrow: not for --help

        return CorpusSpec(
            fmt=self.format,
            text_field=self.text_field,
            id_field=self.id_field,
            keep_fields=self.keep_fields,
            max_record_bytes=self.max_record_bytes,
            max_record_lines=self.max_record_lines,
            on_bad_file=self.on_bad_file,
        )

    def check_launcher(self, workers_here: bool) -> None:
        """The encoder settings this machine can check (threads, batching, the compute dtype;
        the device only when the workers run here: a Dataflow launcher has no GPU).

        Raises:
            ValueError: naming the option.
        """
        from dataclasses import replace

        settings = self.encoder_settings()
        (settings if workers_here else replace(settings, device=None)).validate()

    def encoder_settings(self) -> EncoderSettings:
        """The encoder settings: a corpus is embedded as documents, so with no prompt option
        the model's ``document`` prompt (sentence-transformers' ``encode_document``), and
        ``sbert search`` can give queries the model's ``query`` prompt."""
        return encoder_settings(self, task="document")
