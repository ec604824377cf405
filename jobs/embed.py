"""``sbert embed``: the main job. Text corpus -> Parquet embeddings + errors + manifest.

    sbert embed --input 'corpus/*.jsonl.gz' --output out/embeddings [--model M]
        [--text-field text] [--id-field id] [--keep-fields a,b] [--keep-text]
        [--dtype float32|float16] [--normalize/--no-normalize] [--max-error-rate R]
        [--overwrite] [Beam options: --runner, --direct_num_workers, ...]

Every row read is either embedded or written to ``OUTPUT/errors/`` with a reason, and
``_manifest.json`` (written last, only on success) records read == embedded + rejected. The run
writes into ``OUTPUT/_attempts/<run id>/`` and publishes in one step
(``pipelines/io/output_dir.py``), so a failed or killed run leaves the previous output as it was. A
run in which every row is rejected fails (nothing is published) unless ``--allow-all-rejected`` is
given."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter

from jobs.beam_options import runner_name
from jobs.errors import JobFailedError
from jobs.job_options import job_output
from jobs.model_options import encoder_settings
from jobs.parsers.embed import build_parser
from jobs.pipeline_run import new_pipeline, options_for, run_pipeline, show_progress
from pipelines.embed.model_handler import (
    ZERO_VECTORS,
    DeterministicInferenceError,
    SbertModelHandler,
)
from pipelines.embed.read_corpus import (
    READ_LEDGER,
    READS,
    RECORDS,
    REJECTED,
    ReadCorpus,
    RecordReads,
    RejectDuplicateIds,
    read_ledger,
    refuse_output_inside_input,
)
from pipelines.embed.sinks import WriteEmbeddings, WriteErrors, output_schema
from pipelines.embed.transform import EMBEDDED, Embed
from pipelines.io.corpus_reader import (
    CorpusSpec,
)
from pipelines.io.counters import METRICS_NAMESPACE
from pipelines.io.embeddings import count_rows, shard_paths
from pipelines.io.manifest_fields import created_now, software_versions
from pipelines.io.output_dir import OutputLayout, join
from pipelines.io.schemas import ERRORS_DIR
from pipelines.io.staged_output import StagedOutput
from pipelines.vectors.progress import close_shared_progress
from sbert_core.encoder_settings import EncoderSettings

logger = logging.getLogger(__name__)

# What an embed run writes: parts at the top level and under errors/ (docs/architecture.md).
LAYOUT = OutputLayout(datasets=("", ERRORS_DIR))


@dataclass(frozen=True)
class EmbedSummary:
    """What a finished embed job reports."""

    output: str
    read: int
    embedded: int
    rejected: int
    truncated: int | None
    seconds: float

    def line(self) -> str:
        """One-line human summary."""
        rate = self.embedded / self.seconds if self.seconds > 0 else float("inf")
        truncated = "" if self.truncated is None else f", {self.truncated} truncated"
        return (
            f"read {self.read} rows: {self.embedded} embedded{truncated}, {self.rejected} rejected "
            f"(see {join(self.output, ERRORS_DIR)}) in {self.seconds:.1f}s ({rate:.0f} texts/s) "
            f"-> {self.output}"
        )


def run(argv: list[str] | None = None, test_pipeline: beam.Pipeline | None = None) -> EmbedSummary:
    """Build and run the embed pipeline; returns the summary after the manifest is written.

    Args:
        argv: job options followed by any Beam options.
        test_pipeline: a pipeline to build into (tests pass a ``TestPipeline``).

    Raises:
        ModelLoadError, FileNotFoundError, OutputExistsError, ValueError: before any work starts.
        JobFailedError: the run finished but rows were lost or the error rate was too high.
    """
    args, beam_args = build_parser().parse_known_args(argv)
    spec, settings = _checked(args)
    options = options_for(beam_args, test_pipeline)
    # Fail before any work: the settings (above), the model's files, the input, then the output.
    # What the manifest records: the model with the prompt and dimensions these settings
    # choose (an unknown prompt name or a truncate_dim above the model's fails here).
    description = settings.describe(settings.inspect())
    read_corpus = ReadCorpus(args.input, spec)
    refuse_output_inside_input(args.output, args.input, read_corpus.files)
    schema = output_schema(description["dim"], args.dtype, args.keep_text, spec.keep_fields)
    out = job_output("embed", args.output, args.overwrite, argv, LAYOUT)
    with out:
        return _run_pipeline(
            args, out, (description, settings, schema), options, spec, read_corpus, test_pipeline
        )


def check_options(argv: list[str]) -> None:
    """Check this command's option values without reading inputs or touching any output.

    ``sbert run`` calls it for every stage before running the first one.

    Raises:
        ValueError, FileNotFoundError: a value the command would refuse, naming the option.
    """
    _checked(build_parser().parse_known_args(argv)[0])


def _checked(args) -> tuple[CorpusSpec, EncoderSettings]:
    """The corpus spec and encoder settings of valid options; ValueError naming a bad one."""
    if not 0.0 <= args.max_error_rate <= 1.0:
        raise ValueError(f"--max-error-rate must be in [0, 1], got {args.max_error_rate}")
    keep_fields = tuple(name for name in args.keep_fields.split(",") if name)
    reserved = {"id", "embedding", "n_tokens", "truncated", "text"} & set(keep_fields)
    if reserved:
        raise ValueError(
            f"--keep-fields may not include output columns: {', '.join(sorted(reserved))}"
        )
    spec = CorpusSpec(
        fmt=args.format,
        text_field=args.text_field,
        id_field=args.id_field,
        keep_fields=keep_fields,
        max_record_bytes=args.max_record_bytes,
        max_record_lines=args.max_record_lines,
        on_bad_file=args.on_bad_file,
    )
    # A corpus is embedded as documents: with no prompt option, the model's ``document`` prompt
    # (sentence-transformers' encode_document), so that `sbert search` can give queries the
    # model's ``query`` prompt.
    settings = replace(encoder_settings(args), task="document")
    settings.validate()
    if args.min_batch_size < 1 or args.max_batch_size < args.min_batch_size:
        raise ValueError(
            f"--min-batch-size ({args.min_batch_size}) must be at least 1 and at most "
            f"--max-batch-size ({args.max_batch_size})"
        )
    return spec, settings


def _run_pipeline(
    args, out: StagedOutput, model, options, spec, read_corpus, test_pipeline
) -> EmbedSummary:
    """Build and run the pipeline into ``out``'s attempt area, then check and publish."""
    description, settings, schema = model
    keep_fields = spec.keep_fields
    show_progress(options)

    handler = SbertModelHandler(
        settings, min_batch_size=args.min_batch_size, max_batch_size=args.max_batch_size
    )
    n_groups, n_shards = _grouping(args.batching, options, read_corpus.total_bytes)
    pipeline = new_pipeline(options, test_pipeline)
    corpus = pipeline | "ReadCorpus" >> read_corpus
    records, rejected = corpus[RECORDS], [corpus[REJECTED]]
    if args.id_field:
        unique = records | "RejectDuplicateIds" >> RejectDuplicateIds()
        records = unique[RECORDS]
        rejected.append(unique[REJECTED])
    # Grouping by id already redistributed the records; no second shuffle is needed.
    embed = Embed(handler, n_groups=n_groups, reshuffle=not args.id_field)
    if args.accelerator:  # GPUs for this step only; local runners ignore the hint
        embed = embed.with_resource_hints(accelerator=args.accelerator)
    embedded = records | "Embed" >> embed
    rejected.append(embedded[REJECTED])
    written = [
        embedded[EMBEDDED]
        | "WriteEmbeddings"
        >> WriteEmbeddings(
            out.attempt,
            schema,
            dtype=args.dtype,
            keep_text=args.keep_text,
            keep_fields=keep_fields,
            num_shards=n_shards,
        ),
        tuple(rejected)
        | "FlattenRejected" >> beam.Flatten()
        | "WriteErrors" >> WriteErrors(out.attempt, num_shards=n_shards),
        corpus[READS] | "RecordReads" >> RecordReads(out.attempt),
    ]
    # One final node downstream of every write: the Dask runner computes only the lineage of
    # the last transform applied, so without it some branches would silently not run.
    tuple(written) | "FlattenWritten" >> beam.Flatten() | "Finished" >> beam.Map(str)

    try:
        finished = run_pipeline(pipeline, options, test_pipeline=test_pipeline)
    except DeterministicInferenceError as err:
        raise JobFailedError(f"{err}; nothing was published") from None
    finally:
        close_shared_progress()  # the embed bar's last count, before the summary or the error
    return _finish(
        args, out, description, options, spec, read_corpus.files, finished.result, finished.seconds
    )


def _grouping(batching: str, options, total_bytes: int) -> tuple[int | None, int | None]:
    """(inference groups, output shards) for grouped batching, or (None, None) for bundles."""
    if batching == "bundle" or (batching == "auto" and "DaskRunner" not in runner_name(options)):
        return None, None
    # About 64 KiB of text per inference batch (a thousand short sentences) and one output
    # shard per 4 MiB of input (~100 MB of float32 vectors for short texts).
    return max(1, total_bytes // 65_536), max(1, -(-total_bytes // 4_194_304))


def _finish(
    args,
    out: StagedOutput,
    description: dict,
    options,
    spec: CorpusSpec,
    files,
    result,
    seconds: float,
) -> EmbedSummary:
    """Count what was written, check nothing was lost, then publish with the manifest."""
    attempt = out.attempt
    parts = shard_paths(attempt)
    embedded = count_rows(parts)
    rejected = count_rows(shard_paths(join(attempt, ERRORS_DIR)))
    ledger = read_ledger(attempt)
    kept = f"; the previous content of {args.output} is unchanged"
    unread = sorted({path for path, _, _ in files} - set(ledger))
    if unread:
        raise JobFailedError(
            f"{len(unread)} input file(s) were not read to the end (first: {unread[0]}); "
            f"nothing was published{kept}"
        )
    read = sum(ledger.values())
    read_counter = _counter(result, "read")
    if read != embedded + rejected or read_counter not in (None, read):
        raise JobFailedError(
            f"rows were lost: read {read} (counter: {read_counter}), but wrote {embedded} "
            f"embeddings and {rejected} rejections; nothing was published{kept}"
        )
    summary = EmbedSummary(
        args.output, read, embedded, rejected, _counter(result, "truncated"), seconds
    )
    if read and rejected / read > args.max_error_rate:
        raise JobFailedError(
            f"{rejected} of {read} rows rejected ({rejected / read:.1%}), more than "
            f"--max-error-rate {args.max_error_rate:.1%}; see {join(attempt, ERRORS_DIR)}; "
            f"nothing was published{kept}"
        )
    if read and not embedded and not args.allow_all_rejected:
        raise JobFailedError(
            f"all {read} rows were rejected, none embedded (see {join(attempt, ERRORS_DIR)}); "
            f"nothing was published{kept}; pass --allow-all-rejected to publish such a run"
        )
    manifest = {
        "kind": "embeddings",
        **description,
        "dtype": args.dtype,
        "compute_dtype": args.compute_dtype,
        "counts": {
            "read": read,
            "embedded": embedded,
            "rejected": rejected,
            "truncated": summary.truncated,
            "tokens": _counter(result, "tokens"),
            "zero_vectors": _counter(result, ZERO_VECTORS),
        },
        "input": {
            "pattern": args.input,
            **asdict(spec),
            "files": [{"path": path, "rows": rows} for path, rows in sorted(ledger.items())],
        },
        "keep_text": args.keep_text,
        "shards": sorted(out.final_name(path.rsplit("/", 1)[-1]) for path in parts),
        "runner": runner_name(options),
        "software": software_versions(),
        "seconds": round(seconds, 3),
        "created": created_now(),
    }
    FileSystems.delete([join(attempt, READ_LEDGER)])  # now recorded in the manifest
    out.commit(manifest)
    return summary


def _counter(result, name: str) -> int | None:
    try:
        query = result.metrics().query(
            MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name(name)
        )
    except (NotImplementedError, AttributeError):
        return None
    counters = query.get("counters", [])
    if not counters:
        return None
    return int(sum(c.committed if c.committed is not None else c.attempted for c in counters))


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run and print the summary."""
    summary = run(argv)
    print(summary.line())
    return 0
