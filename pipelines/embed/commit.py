"""The embed pipeline's last step: count what was written, check nothing was lost, publish.

The step runs inside the pipeline, on a worker, once every write has finished: its one input is
the sum of small per-element tallies (rows read, rows embedded, truncated, tokens, zero vectors)
flattened with one tally per finished file of every write, and a global combine emits that sum
only after all of its inputs are complete. Beam's file sinks emit a file's name only after the
file has its final name (``WriteToParquet``/``WriteToParquetBatched`` yield them from
``finalize_write``, after the renames), and so do the sharded writer (after the atomic write)
and ``RecordReads`` (after its ledger entry is closed). Nothing here reads runner metrics, so the
step works where a runner reports none (Dask) and where nobody waits for the job (a Dataflow flex
template, a detached Spark or Flink submission).

A failed check raises :class:`CommitRefusedError` (``DataFileError`` for a damaged input), which
fails the job with its message and publishes nothing; the previous output stays as it was.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import apache_beam as beam
from sbert_pipeline.embed.model_handler import ZERO_VECTORS
from sbert_pipeline.embed.read_corpus import read_ledger
from sbert_pipeline.io.atomic import write_json_replacing
from sbert_pipeline.io.embeddings import count_rows, shard_paths
from sbert_pipeline.io.manifest_fields import created_now
from sbert_pipeline.io.output_dir import MANIFEST, join
from sbert_pipeline.io.rejections import rejection_reasons
from sbert_pipeline.io.resources import peak_rss
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.io.staged_output import StagedOutput

# Tallies the checks use; a leading "_" keeps a tally out of the manifest's counts.
ROWS_READ = "_rows_read"  # rows the readers emitted (records + rejections)
FILES_WRITTEN = "_files_written"  # files the writes finished (shards, ledger entries)
# Tallies of embedded rows that the manifest reports, always present (0 when nothing embedded).
EMBEDDING_COUNTS = ("truncated", "tokens", ZERO_VECTORS)
# The manifest's section of the memory budget, what the run needed of it and its peak RSS
# (pipelines/embed/memory.py; the peak is the committing process's).
MEMORY_FIELD = "memory_budget"


class CommitRefusedError(RuntimeError):
    """A check of the commit step failed (rows lost, too many rejected); nothing was published."""


@dataclass(frozen=True)
class CommitPlan:
    """What the commit step needs besides the tallies, fixed when the pipeline is built.

    Attributes:
        output: the output folder as the user named it (for messages).
        input_files: every input file matched when the pipeline was built.
        max_error_rate: the largest fraction of rejected rows that may be published.
        allow_all_rejected: publish a run in which no row embedded.
        manifest: the manifest fields known at launch (model, dtypes, input spec, runner, ...);
            the step adds ``counts``, the files read, ``shards``, ``seconds`` and ``created``.
        started: ``time.time()`` at launch; the manifest's ``seconds`` count from it.
        reported: tallies the manifest's counts carry besides read / embedded / rejected
            (0 when no element added to them).
    """

    output: str
    input_files: tuple[str, ...]
    max_error_rate: float
    allow_all_rejected: bool
    manifest: Mapping
    started: float
    reported: tuple[str, ...] = field(default=EMBEDDING_COUNTS)


def tally(name: str, _element: object = None) -> dict[str, int]:
    """One element's tally: 1 under ``name`` (``beam.Map(functools.partial(tally, NAME))``)."""
    return {name: 1}


def counted_as(name: str):
    """A picklable function mapping any element to ``{name: 1}``."""
    return functools.partial(tally, name)


def embedding_tally(result) -> dict[str, int]:
    """The tallies of one embedded row (a ``PredictionResult`` holding an ``Embedding``)."""
    embedding = result.inference
    return {
        "truncated": int(embedding.truncated),
        "tokens": int(embedding.n_tokens),
        ZERO_VECTORS: int(not embedding.vector.any()),
    }


class SumTallies(beam.CombineFn):
    """Sums ``{name: count}`` dicts; every name in ``names`` is present in the result."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names = tuple(names)

    def create_accumulator(self) -> dict[str, int]:
        return dict.fromkeys(self._names, 0)

    def add_input(self, accumulator: dict[str, int], element: Mapping[str, int]) -> dict:
        for name, value in element.items():
            accumulator[name] = accumulator.get(name, 0) + value
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict[str, int]]) -> dict[str, int]:
        merged = self.create_accumulator()
        for accumulator in accumulators:
            self.add_input(merged, accumulator)
        return merged

    def extract_output(self, accumulator: dict[str, int]) -> dict[str, int]:
        return accumulator


def manifest_counts(
    read: int, embedded: int, rejected: int, tallies: Mapping[str, int], reported: Iterable[str]
) -> dict[str, int]:
    """The manifest's ``counts``: the checked row counts, then each reported tally."""
    return {
        "read": read,
        "embedded": embedded,
        "rejected": rejected,
        **{name: int(tallies.get(name, 0)) for name in reported},
    }


def checked_row_counts(
    directory: str, input_files: Iterable[str], tallies: Mapping[str, int], output: str
) -> tuple[dict[str, int], int, int]:
    """The rows a run wrote into ``directory`` (its parts, ``_errors/`` parts and read ledger),
    checked: every input file read to its end, and rows read == embedded + rejected == the rows
    the readers emitted (``tallies[ROWS_READ]``).

    Returns:
        ``({input path: rows read}, embedded, rejected)``.

    Raises:
        CommitRefusedError: a file was not read to its end, or rows were lost.
        DataFileError: an input file was damaged and ``on_bad_file`` was ``"fail"``.
    """
    embedded = count_rows(shard_paths(directory))
    rejected = count_rows(shard_paths(join(directory, ERRORS_DIR)))
    ledger = read_ledger(directory)
    kept = f"; the previous content of {output} is unchanged"
    unread = sorted(set(input_files) - set(ledger))
    if unread:
        raise CommitRefusedError(
            f"{len(unread)} input file(s) were not read to the end (first: {unread[0]}); "
            f"nothing was published{kept}"
        )
    read = sum(ledger.values())
    counted = tallies.get(ROWS_READ, 0)
    if read != embedded + rejected or counted != read:
        raise CommitRefusedError(
            f"rows were lost: read {read} (counter: {counted}), but wrote {embedded} "
            f"embeddings and {rejected} rejections; nothing was published{kept}"
        )
    return ledger, embedded, rejected


def check_rejections(
    read: int, embedded: int, rejected: int, plan: CommitPlan, errors: str
) -> None:
    """Refuse a run with more rejected rows than ``--max-error-rate`` allows, or with every row
    rejected (without ``--allow-all-rejected``); ``errors`` is where the dead letters are.

    Raises:
        CommitRefusedError: naming the counts and the option.
    """
    kept = f"; the previous content of {plan.output} is unchanged"
    if read and rejected / read > plan.max_error_rate:
        raise CommitRefusedError(
            f"{rejected} of {read} rows rejected ({rejected / read:.1%}), more than "
            f"--max-error-rate {plan.max_error_rate:.1%}; {_reasons(errors)}"
            f"nothing was published{kept}"
        )
    if read and not embedded and not plan.allow_all_rejected:
        raise CommitRefusedError(
            f"all {read} rows were rejected, none embedded; {_reasons(errors)}"
            f"nothing was published{kept}; pass --allow-all-rejected to publish such a run"
        )


def _reasons(errors: str) -> str:
    """The most common reasons of the rejected rows and where all of them are, for a
    refusal's message."""
    reasons = rejection_reasons(errors)
    return f"{reasons} (every row: {errors}); " if reasons else f"see {errors}; "


def commit_embeddings(out: StagedOutput, plan: CommitPlan, tallies: Mapping[str, int]) -> dict:
    """Count the rows in ``out``'s attempt area, check them, and publish with the manifest.

    Args:
        out: the run's staged output (no lock needed: the run id in ``_STARTED`` is checked).
        plan: the launch-time part of the manifest and the checks' limits.
        tallies: what the pipeline counted (:data:`ROWS_READ` and the reported names).

    Returns:
        The manifest written (or, for a retried step, the one this run already wrote).

    Raises:
        CommitRefusedError: rows were lost, an input file was not read to its end, too many
            rows were rejected, or every row was (without ``allow_all_rejected``).
        DataFileError: an input file was damaged and ``on_bad_file`` was ``"fail"``.
        OutputLockedError: another run took the folder over; nothing was published.
    """
    done = out.resume()  # a retried step: published already, or its interrupted commit undone
    if done is not None:
        return done
    attempt = out.attempt
    parts = shard_paths(attempt)
    ledger, embedded, rejected = checked_row_counts(attempt, plan.input_files, tallies, plan.output)
    read = sum(ledger.values())
    check_rejections(read, embedded, rejected, plan, join(attempt, ERRORS_DIR))
    launch = dict(plan.manifest)
    manifest = {
        **launch,
        "counts": manifest_counts(read, embedded, rejected, tallies, plan.reported),
        "input": {
            **launch.get("input", {}),
            "files": [{"path": path, "rows": rows} for path, rows in sorted(ledger.items())],
        },
        "shards": sorted(out.final_name(path.rsplit("/", 1)[-1]) for path in parts),
        "seconds": round(time.time() - plan.started, 3),
        "created": created_now(),
    }
    if MEMORY_FIELD in launch:  # the budget counted at launch, and the peak measured here
        manifest[MEMORY_FIELD] = {**launch[MEMORY_FIELD], "peak_rss_bytes": peak_rss()}
    return out.commit(manifest)


class _CommitFn(beam.DoFn):
    def __init__(self, out: StagedOutput, plan: CommitPlan) -> None:
        self._out = out
        self._plan = plan

    def process(self, tallies: dict[str, int]) -> Iterator[str]:
        commit_embeddings(self._out, self._plan, tallies)
        yield join(self._out.directory, MANIFEST)


class CommitEmbeddings(beam.PTransform):
    """Tallies (``{name: count}`` dicts from every branch, one per written file included) ->
    the published output's manifest path, once all of them are in.

    Apply it last (the Dask runner computes only the lineage of the last transform applied).
    """

    def __init__(self, out: StagedOutput, plan: CommitPlan) -> None:
        super().__init__()
        self._out = out
        self._plan = plan

    def expand(self, tallies):
        summed = _summed(tallies, self._plan.reported)
        return summed | "Publish" >> beam.ParDo(_CommitFn(self._out, self._plan))


def _summed(tallies, reported: tuple[str, ...]):
    """The one global sum of the tallies, once every branch is complete."""
    names = (ROWS_READ, FILES_WRITTEN, *reported)
    return (
        tallies
        | "FlattenTallies" >> beam.Flatten()
        # Without defaults: no side input, which every runner handles the same way; the
        # input is never empty (each input file leaves a ledger entry).
        | "SumTallies" >> beam.CombineGlobally(SumTallies(names)).without_defaults()
    )


TALLIES = "_tallies.json"  # where RecordTallies writes the sum, in its folder


class _RecordTalliesFn(beam.DoFn):
    def __init__(self, directory: str) -> None:
        self._directory = directory

    def process(self, tallies: dict[str, int]) -> Iterator[str]:
        path = join(self._directory, TALLIES)
        write_json_replacing(path, dict(tallies))
        yield path


class RecordTallies(beam.PTransform):
    """Tallies -> their sum in ``DIR/_tallies.json``, once all of them are in: the last step of
    a pipeline whose launcher checks and publishes (an incremental embed's run over one input
    file). Apply it last, like :class:`CommitEmbeddings`."""

    def __init__(self, directory: str, reported: tuple[str, ...]) -> None:
        super().__init__()
        self._directory = directory
        self._reported = reported

    def expand(self, tallies):
        summed = _summed(tallies, self._reported)
        return summed | "RecordSum" >> beam.ParDo(_RecordTalliesFn(self._directory))
