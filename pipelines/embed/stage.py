"""The embed stage: a text corpus -> Parquet embeddings + errors + manifest.

Run from Python as ``embed.run(embed.Options(input=..., output=...))``,
or with the command ``sbert embed`` (its ``--help`` lists the options).

Every row read is either embedded or written to ``OUTPUT/_errors/`` with a reason, and
``_manifest.json`` (written last, only on success) records read == embedded + rejected. The run
writes into ``OUTPUT/_attempts/<run id>/`` and publishes in one step
(``pipelines/io/output_dir.py``), so a failed or killed run leaves the previous output as it was. A
run in which every row is rejected fails (nothing is published) unless ``--allow-all-rejected`` is
given. Beam's ``--no_wait_until_finish`` only submits the job: its last step publishes."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from sbert_pipeline.embed.commit import (
    EMBEDDING_COUNTS,
    FILES_WRITTEN,
    MEMORY_FIELD,
    ROWS_READ,
    CommitEmbeddings,
    CommitPlan,
    CommitRefusedError,
    counted_as,
    embedding_tally,
)
from sbert_pipeline.embed.exact_copies import (
    EXACT_DEDUP_COUNTS,
    EXACT_DEDUP_RULE,
    EmbedDistinctTexts,
    exact_dedup_tally,
)
from sbert_pipeline.embed.memory import check_embed_memory, embed_memory
from sbert_pipeline.embed.model_handler import DeterministicInferenceError, SbertModelHandler
from sbert_pipeline.embed.options import Options
from sbert_pipeline.embed.read_corpus import (
    READS,
    RECORDS,
    REJECTED,
    ReadCorpus,
    RecordReads,
    RejectDuplicateIds,
    RejectTakenIds,
    refuse_output_inside_input,
)
from sbert_pipeline.embed.sinks import WriteEmbeddings, WriteErrors, output_schema
from sbert_pipeline.embed.transform import EMBEDDED, Embed
from sbert_pipeline.io.corpus_reader import CorpusSpec
from sbert_pipeline.io.manifest_fields import software_versions
from sbert_pipeline.io.output_dir import MANIFEST, OutputLayout, join
from sbert_pipeline.io.previous_output import NOT_ASKED
from sbert_pipeline.io.schemas import ERRORS_DIR, LEGACY_ERRORS_DIRS
from sbert_pipeline.io.staged_output import StagedOutput
from sbert_pipeline.stage_api.beam_options import is_local, runner_name
from sbert_pipeline.stage_api.beam_run import (
    new_pipeline,
    options_for,
    run_pipeline,
    show_progress,
    step_error,
    waits,
)
from sbert_pipeline.stage_api.dask_cluster import dask_partitions
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.stage_output import stage_output
from sbert_pipeline.stage_api.stops import JobFailedError
from sbert_pipeline.vectors.progress import close_shared_progress

from sbert_core.errors import DataFileError
from sbert_core.model.artifact import weight_files

logger = logging.getLogger(__name__)

# What an embed run writes: parts at the top level and under _errors/ (docs/architecture.md);
# earlier versions' errors/ still counts as ours.
# Grouped batching: at least this many inference batches per Dask partition.
GROUPS_PER_PARTITION = 1
LAYOUT = OutputLayout(datasets=("", ERRORS_DIR), legacy_datasets=LEGACY_ERRORS_DIRS)
# The manifest's counts besides read / embedded / rejected, in one place: each is the sum of a
# tally branch that ``build_pipeline`` adds to ``tallies`` (pipelines/embed/commit.py).
REPORTED_COUNTS = EMBEDDING_COUNTS


@dataclass(frozen=True)
class EmbedSummary:
    """What a finished embed job reports."""

    output: str
    read: int
    embedded: int
    rejected: int
    truncated: int | None
    seconds: float
    copies: int | None = None  # --exact-dedup: rows written with their representative's vector
    kept: int = 0  # --incremental: rows of unchanged input files, kept as they were

    def line(self) -> str:
        """One-line human summary (the rate counts the rows embedded by this run)."""
        embedded = self.embedded - self.kept
        rate = embedded / self.seconds if self.seconds > 0 else float("inf")
        truncated = "" if self.truncated is None else f", {self.truncated} truncated"
        if self.copies is not None:
            distinct = self.embedded - self.copies
            truncated += f" ({distinct} distinct normalised texts, {self.copies} copies)"
        read = f"read {self.read} rows"
        if self.kept:
            read = f"{self.read} rows, {self.kept} kept from unchanged files"
        # Pointed at only when there is something to see there.
        errors = f" (see {join(self.output, ERRORS_DIR)})" if self.rejected else ""
        return (
            f"{read}: {embedded} embedded{truncated}, {self.rejected} rejected{errors} in "
            f"{self.seconds:.1f}s ({rate:.0f} texts/s) -> {self.output}"
        )

    @classmethod
    def from_manifest(cls, output: str, manifest: dict) -> EmbedSummary:
        """The summary of a published run, read from its manifest."""
        counts = manifest["counts"]
        return cls(
            output,
            counts["read"],
            counts["embedded"],
            counts["rejected"],
            counts.get("truncated"),
            float(manifest["seconds"]),
            counts.get("copies"),
            int((manifest.get("incremental") or {}).get("rows_old", 0)),
        )


@dataclass(frozen=True)
class EmbedSubmitted:
    """A job handed to its runner without waiting for it (Beam's ``--no_wait_until_finish``)."""

    output: str
    runner: str
    job_id: str | None

    def line(self) -> str:
        """One-line human summary."""
        job = f" as job {self.job_id}" if self.job_id else ""
        return (
            f"submitted to {self.runner}{job}; its last step publishes {self.output} (with "
            f"{join(self.output, MANIFEST)}) once every row is embedded or rejected and checked"
        )


@dataclass
class EmbedJob:
    """A built embed pipeline and the output folder it holds; its last step publishes.

    Use it as a context manager: leaving it drops the folder's lock (never the attempt area,
    which a job still running, or the next run, needs).
    """

    pipeline: beam.Pipeline
    output: StagedOutput
    beam_options: PipelineOptions
    directory: str  # --output as the user gave it

    def __enter__(self) -> EmbedJob:
        return self

    def __exit__(self, *exc) -> None:
        self.output.release()


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Build and run the embed pipeline; its last step checks the counts and publishes.

    Args:
        options: the stage's options; its Beam options ``--no_wait_until_finish``: only submit.
        pipeline: a pipeline to build into (tests pass a ``TestPipeline``).

    Returns:
        The output folder, its published manifest and the summary read from it; or, when the
        launcher does not wait for a job still running, what was submitted (an
        :class:`EmbedSubmitted` summary and an empty manifest: nothing is published yet).

    Raises:
        ModelLoadError, FileNotFoundError, OutputExistsError, ValueError: before any work starts.
        JobFailedError: the run finished but rows were lost or the error rate was too high.
        DataFileError: an input file was damaged (and ``on_bad_file`` is ``fail``).
    """
    with build(options, pipeline) as job:
        return launch(job, pipeline)


def build(options: Options, pipeline: beam.Pipeline | None = None) -> EmbedJob:
    """Check the model and the input, take the output folder and build the pipeline, without
    running it.

    Run ``job.pipeline`` with any runner (or :func:`launch` it) inside ``with job:``; the
    manifest appears when the pipeline's last step has published.

    Raises:
        ModelLoadError, FileNotFoundError, OutputExistsError, ValueError: before any work starts.
    """
    if options.incremental:
        raise ValueError(
            "an incremental embed runs one pipeline per input file and publishes from its "
            "launcher: run it with sbert_pipeline.embed.run (pipelines/embed/incremental.py)"
        )
    started = time.time()
    spec = options.corpus_spec()
    settings = options.encoder_settings()
    beam_options = options_for(options.beam_options, pipeline)
    options.check_launcher(workers_here=is_local(beam_options))
    # Fail before any work: the settings (above), the input (its files and their first
    # records' fields, before a model is read), the model's files, then the output.
    read_corpus = ReadCorpus(options.input, spec)
    refuse_output_inside_input(options.output, options.input, read_corpus.files)
    # What the manifest records: the model with the prompt and dimensions these settings
    # choose (an unknown prompt name or a truncate_dim above the model's fails here).
    info = settings.inspect()
    description = settings.describe(info)
    # The files are listed, not read: refuse a run that cannot fit before any work.
    memory = embed_memory(
        options.budget(),
        info,
        settings,
        read_corpus.files,
        max_batch_size=options.max_batch_size,
        dtype=options.dtype,
        weight_bytes=sum(
            path.stat().st_size
            for path in weight_files(info.transformer_dir, allow_pickle=settings.allow_pickle)
        ),
    )
    if is_local(beam_options):  # elsewhere the workers hold the model and the records
        check_embed_memory(memory, len(read_corpus.files))
    schema = output_schema(
        description["dim"],
        options.dtype,
        options.keep_text,
        spec.keep_fields,
        copy_of=options.exact_dedup,
    )
    out = stage_output("embed", options, LAYOUT)
    try:
        plan = CommitPlan(
            output=options.output,
            input_files=tuple(path for path, _, _ in read_corpus.files),
            max_error_rate=options.max_error_rate,
            allow_all_rejected=options.allow_all_rejected,
            manifest={
                **launch_manifest(options, description, spec, beam_options),
                # The commit step adds the peak RSS measured (pipelines/embed/commit.py).
                MEMORY_FIELD: memory.describe(0),
            },
            started=started,
            reported=REPORTED_COUNTS + (EXACT_DEDUP_COUNTS if options.exact_dedup else ()),
        )
        built = build_pipeline(
            options,
            out.attempt,
            CommitEmbeddings(out, plan),
            (settings, schema, spec),
            beam_options,
            read_corpus,
            pipeline,
        )
    except BaseException:
        out.release()
        raise
    return EmbedJob(built, out, beam_options, options.output)


def launch(job: EmbedJob, pipeline: beam.Pipeline | None = None) -> Result:
    """Run a built job: wait for it and summarise its manifest, or only submit it when Beam's
    ``--no_wait_until_finish`` is given (see :func:`sbert_pipeline.stage_api.beam_run.waits`).

    A run whose manifest is published succeeds even if clearing up after the commit failed
    (a warning says so; the next run clears the rest): the outcome follows what was published.

    Raises:
        JobFailedError: the commit step refused the run, or inference failed for every text.
        DataFileError: an input file was damaged (and ``on_bad_file`` is ``fail``).
    """
    wait = waits(job.beam_options)
    try:
        finished = run_pipeline(job.pipeline, job.beam_options, test_pipeline=pipeline, wait=wait)
    except Exception as err:
        published = job.output.committed_manifest()
        if published is not None:  # the exit status says what was published
            logger.warning(
                "%s was published, but clearing up after it failed (%s); the next run into it "
                "clears what is left",
                job.directory,
                err,
            )
            return published_result(job.directory, published)
        known = job_error(err)
        if known is None:
            raise
        raise known from None
    finally:
        close_shared_progress()  # the embed bar's last count, before the summary or the error
    manifest = job.output.committed_manifest()
    if manifest is not None:
        return published_result(job.directory, manifest)
    if not wait:
        job_id = getattr(finished.result, "job_id", None)  # a method on Dataflow's result
        job_id = job_id() if callable(job_id) else job_id
        submitted = EmbedSubmitted(job.directory, finished.runner, str(job_id) if job_id else None)
        return Result(job.directory, {}, submitted)
    raise JobFailedError(
        f"the pipeline finished but its last step published nothing into {job.directory}"
    )


def published_result(directory: str, manifest: dict) -> Result:
    """The result of a run that published ``manifest`` into ``directory``."""
    return Result(directory, manifest, EmbedSummary.from_manifest(directory, manifest))


def job_error(err: Exception) -> Exception | None:
    """What the launcher raises for an exception of the run: a step's own error, unwrapped."""
    known = step_error(err, (CommitRefusedError, DataFileError, DeterministicInferenceError))
    if isinstance(known, DeterministicInferenceError):
        return JobFailedError(f"{known}; nothing was published")
    if isinstance(known, CommitRefusedError):
        return JobFailedError(str(known))
    # The commit step's own I/O failures (a full disk at the manifest write), as the launcher
    # raised them when it committed.
    return known or step_error(err, (OSError,), step="Commit")


def build_pipeline(
    options: Options,
    directory: str,
    last_step: beam.PTransform,
    model,
    beam_options: PipelineOptions,
    read_corpus: ReadCorpus,
    test_pipeline: beam.Pipeline | None,
    taken: tuple[tuple[str, str], ...] = (),
) -> beam.Pipeline:
    """The embed pipeline: it writes into ``directory`` (a run's attempt area), then applies
    ``last_step`` to the tallies (:class:`CommitEmbeddings`: check and publish).

    ``taken``: ``(part, input file)`` pairs whose ids a record may not have (an incremental
    embed's earlier files, :class:`RejectTakenIds`).
    """
    settings, schema, spec = model
    show_progress(beam_options)

    handler = SbertModelHandler(
        settings, min_batch_size=options.min_batch_size, max_batch_size=options.max_batch_size
    )
    n_groups, n_shards = _grouping(options.batching, beam_options, read_corpus.total_bytes)
    pipeline = new_pipeline(beam_options, test_pipeline)
    corpus = pipeline | "ReadCorpus" >> read_corpus
    rejected = [corpus[REJECTED]]
    # What the commit step counts, each element a {name: count} dict (see the commit step).
    tallies = [
        corpus[RECORDS] | "TallyRecordsRead" >> beam.Map(counted_as(ROWS_READ)),
        corpus[REJECTED] | "TallyRejectedRead" >> beam.Map(counted_as(ROWS_READ)),
    ]
    records = _reject_taken_ids(corpus[RECORDS], rejected, options.id_field, taken)
    embedded = records | "Embed" >> _embed_step(options, handler, n_groups)
    rejected.append(embedded[REJECTED])
    tallies.append(embedded[EMBEDDED] | "TallyEmbedded" >> beam.Map(embedding_tally))
    if options.exact_dedup:
        tallies.append(embedded[EMBEDDED] | "TallyCopies" >> beam.Map(exact_dedup_tally))
    written = {
        "Embeddings": embedded[EMBEDDED]
        | "WriteEmbeddings"
        >> WriteEmbeddings(
            directory,
            schema,
            dtype=options.dtype,
            keep_text=options.keep_text,
            keep_fields=spec.keep_fields,
            num_shards=n_shards,
            copy_of=options.exact_dedup,
        ),
        "Errors": tuple(rejected)
        | "FlattenRejected" >> beam.Flatten()
        | "WriteErrors" >> WriteErrors(directory, num_shards=n_shards),
        "Reads": corpus[READS] | "RecordReads" >> RecordReads(directory),
    }
    # Each write emits a file's name once the file is final, so this sum is complete only after
    # every write has finished.
    tallies += [
        files | f"Tally{name}Written" >> beam.Map(counted_as(FILES_WRITTEN))
        for name, files in written.items()
    ]
    # The last step publishes. Applied last: the Dask runner computes only the lineage of the
    # last transform applied, so every branch above runs.
    label = "Commit" if isinstance(last_step, CommitEmbeddings) else "RecordTallies"
    _ = tuple(tallies) | label >> last_step
    return pipeline


def _reject_taken_ids(
    records: beam.PCollection,
    rejected: list[beam.PCollection],
    id_field: str | None,
    taken: tuple[tuple[str, str], ...],
) -> beam.PCollection:
    """The records whose id no other record (with ``id_field``) and no earlier file
    (``taken``) has; the others are appended to ``rejected``."""
    if id_field:
        unique = records | "RejectDuplicateIds" >> RejectDuplicateIds()
        records = unique[RECORDS]
        rejected.append(unique[REJECTED])
    if taken:
        fresh = records | "RejectTakenIds" >> RejectTakenIds(taken)
        records = fresh[RECORDS]
        rejected.append(fresh[REJECTED])
    return records


def _embed_step(
    options: Options, handler: SbertModelHandler, n_groups: int | None
) -> beam.PTransform:
    """The step that embeds the records (each normalised text once with ``exact_dedup``)."""
    # Grouping by id (or by normalised text) already redistributed the records; no second
    # shuffle is needed.
    embed = Embed(
        handler, n_groups=n_groups, reshuffle=not (options.id_field or options.exact_dedup)
    )
    if options.accelerator:  # GPUs for this step only; local runners ignore the hint
        embed = embed.with_resource_hints(accelerator=options.accelerator)
    if options.exact_dedup:
        embed = EmbedDistinctTexts(embed)
    return embed


def _grouping(batching: str, options, total_bytes: int) -> tuple[int | None, int | None]:
    """(inference groups, output shards) for grouped batching, or (None, None) for bundles."""
    if batching == "bundle" or (batching == "auto" and "DaskRunner" not in runner_name(options)):
        return None, None
    # About 64 KiB of text per inference batch (a thousand short sentences) and one output
    # shard per 4 MiB of input (~100 MB of float32 vectors for short texts); at least a few
    # batches per Dask partition, so that a small corpus keeps every worker busy too.
    n_groups = max(1, total_bytes // 65_536, GROUPS_PER_PARTITION * (dask_partitions(options) or 0))
    return n_groups, max(1, -(-total_bytes // 4_194_304))


def launch_manifest(
    options: Options, description: dict, spec: CorpusSpec, beam_options: PipelineOptions
) -> dict:
    """The manifest's fields known before the run; the commit step adds counts and files."""
    return {
        "kind": "embeddings",
        **description,
        "dtype": options.dtype,
        "compute_dtype": options.compute_dtype,
        "input": {"pattern": options.input, **asdict(spec)},
        "keep_text": options.keep_text,
        **({"exact_dedup": EXACT_DEDUP_RULE} if options.exact_dedup else {}),
        "runner": runner_name(beam_options),
        "software": software_versions(),
        # The section every stage's manifest has (an incremental run replaces it with its own).
        "incremental": {"mode": "full", "reason": NOT_ASKED},
    }
