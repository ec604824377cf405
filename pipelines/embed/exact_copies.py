"""Embed each distinct normalised text once (``sbert embed --exact-dedup``).

Two records hold *the same normalised text* when :func:`sbert_pipeline.io.text_normal.text_key`
gives them one key (NFKC, casefold, whitespace and sentence punctuation collapsed: see that
module). :class:`EmbedDistinctTexts` wraps the :class:`sbert_pipeline.embed.transform.Embed` step:

1. the records are keyed by that hash and grouped; each group's *representative* is its first
   record in corpus order (file path, then row, then id: values of the records, not the order
   they arrive in, so every runner and every rerun picks the same one);
2. only representatives go to the model;
3. every other record of the group (a *copy*) is written too, with the representative's
   vector, ``n_tokens`` and ``truncated`` and its id in the ``copy_of`` column (null for every
   other row). A copy whose representative the model rejected is rejected with it.

So every id read still gets a vector or a dead letter: rows read == distinct texts embedded +
copies + rejected, and the stages after embed see every id.

The copies are joined back to their representative's result by id (a ``CoGroupByKey``) with
only the results of representatives that have copies: the vectors of the other rows are not
shuffled again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import PredictionResult
from sbert_pipeline.embed.model_handler import Embedding
from sbert_pipeline.embed.read_corpus import RECORDS, REJECTED
from sbert_pipeline.embed.transform import EMBEDDED
from sbert_pipeline.io.corpus_reader import CorpusRecord, RejectedRow
from sbert_pipeline.io.counters import METRICS_NAMESPACE
from sbert_pipeline.io.record_limits import COPY_OF
from sbert_pipeline.io.text_normal import text_key

COPIES = "copies"  # metrics counter: rows written with their representative's vector


@dataclass(frozen=True)
class RepresentativeRecord(CorpusRecord):
    """A record embedded for itself and ``n_copies`` other records with its normalised text.

    A ``CorpusRecord`` to every step (the model handler, the writers); the subclass only marks
    the results that must be joined with their copies.
    """

    n_copies: int = 0


@dataclass(frozen=True)
class CopiedEmbedding:
    """The inference part of a copy's ``PredictionResult``: its representative's embedding.

    The fields of :class:`sbert_pipeline.embed.model_handler.Embedding` (so the writers read it the
    same way) plus the representative's id.
    """

    vector: np.ndarray  # (d,) float32, the representative's
    n_tokens: int  # the representative's
    truncated: bool  # the representative's
    copy_of: str


def corpus_order(record: CorpusRecord) -> tuple[str, int, str]:
    """Sort key of a record in corpus order: file path, row (``source`` is ``file:row``), id."""
    path, _, row = record.source.rpartition(":")
    return path, int(row) if row.isdigit() else -1, record.id


class _ChooseRepresentativeFn(beam.DoFn):
    """(text key, records) -> the representative (main output) and its copies (``copies``)."""

    def process(self, keyed: tuple[str, Iterable[CorpusRecord]]) -> Iterator:
        _, records = keyed
        # Two passes over the grouped values instead of a sort: a text repeated a million
        # times needs no list of a million records.
        first = min(records, key=corpus_order)
        # Compared by key, not identity: a runner may decode the values anew on each pass.
        # The key is unique: one source row is one record, and ids are unique by now.
        first_key = corpus_order(first)
        n_copies = 0
        for record in records:
            if corpus_order(record) != first_key:
                n_copies += 1
                yield beam.pvalue.TaggedOutput(COPIES, (first.id, record))
        if n_copies:
            yield RepresentativeRecord(**asdict(first), n_copies=n_copies)
        else:
            yield first


def _has_copies(result: PredictionResult) -> bool:
    return isinstance(result.example, RepresentativeRecord)


def _by_id(result: PredictionResult) -> tuple[str, PredictionResult]:
    return result.example.id, result


def _row_by_id(row: RejectedRow) -> tuple[str | None, RejectedRow]:
    return row.id, row


class _AttachCopiesFn(beam.DoFn):
    """(representative id, its result or rejection, its copies) -> one row per copy."""

    def __init__(self) -> None:
        self._copies = Metrics.counter(METRICS_NAMESPACE, COPIES)

    def process(self, joined: tuple[str, dict]) -> Iterator:
        representative, parts = joined
        copies = list(parts[COPIES])  # none: a representative without copies, or another row
        results, failed = list(parts[EMBEDDED]), list(parts[REJECTED])
        if copies and results:
            embedding: Embedding = results[0].inference
            for record in copies:
                self._copies.inc()
                copied = CopiedEmbedding(
                    embedding.vector, embedding.n_tokens, embedding.truncated, representative
                )
                yield PredictionResult(record, copied)
        elif copies:
            why = failed[0].reason if failed else "it produced no embedding"
            reason = f"copy of the normalised text of {representative}, which was rejected: {why}"
            for record in copies:
                yield beam.pvalue.TaggedOutput(
                    REJECTED, RejectedRow(record.id, record.source, reason, record.text[:200])
                )


class EmbedDistinctTexts(beam.PTransform):
    """Records -> ``{"embedded": PredictionResult, "rejected": RejectedRow}``, each distinct
    normalised text through ``embed`` once (module docstring).

    Args:
        embed: the step that embeds records (an :class:`sbert_pipeline.embed.transform.Embed`,
            with its resource hints); it sees the representatives only.

    Example:
        >>> embedded = records | "Embed" >> EmbedDistinctTexts(Embed(handler))
    """

    def __init__(self, embed: beam.PTransform) -> None:
        super().__init__()
        self._embed = embed

    def expand(self, records):
        chosen = (
            records
            | "KeyByNormalisedText" >> beam.Map(lambda record: (text_key(record.text), record))
            | "GroupByNormalisedText" >> beam.GroupByKey()
            | "ChooseRepresentatives"
            >> beam.ParDo(_ChooseRepresentativeFn()).with_outputs(COPIES, main=RECORDS)
        )
        embedded = chosen[RECORDS] | "EmbedRepresentatives" >> self._embed
        attached = (
            {
                EMBEDDED: embedded[EMBEDDED]
                | "WithCopies" >> beam.Filter(_has_copies)
                | "KeyResultById" >> beam.Map(_by_id),
                REJECTED: embedded[REJECTED] | "KeyRejectedById" >> beam.Map(_row_by_id),
                COPIES: chosen[COPIES],
            }
            | "JoinCopies" >> beam.CoGroupByKey()
            | "AttachCopies" >> beam.ParDo(_AttachCopiesFn()).with_outputs(REJECTED, main=EMBEDDED)
        )
        return {
            EMBEDDED: (embedded[EMBEDDED], attached[EMBEDDED])
            | "FlattenEmbedded" >> beam.Flatten(),
            REJECTED: (embedded[REJECTED], attached[REJECTED])
            | "FlattenRejected" >> beam.Flatten(),
        }


def is_copy(result: PredictionResult) -> bool:
    """Whether a result is a copy's (written with its representative's vector)."""
    return isinstance(result.inference, CopiedEmbedding)


# The embed manifest's counts of an --exact-dedup run: embedded == distinct_texts + copies.
EXACT_DEDUP_COUNTS = ("distinct_texts", COPIES)
# The embed manifest's ``exact_dedup``: what made two texts one, and which row was embedded.
EXACT_DEDUP_RULE = {
    "same_text": "pipelines/io/text_normal.py: NFKC, casefold, runs of whitespace and sentence "
    "punctuation to one space (BLAKE2b-128 of the result)",
    "representative": "first in corpus order: file path, row, id",
}


def exact_dedup_tally(result: PredictionResult) -> dict[str, int]:
    """One written row's tally for the commit step (pipelines/embed/commit.py)."""
    return {COPIES: 1} if is_copy(result) else {"distinct_texts": 1}


def count_copies(paths: Iterable[str]) -> int:
    """Rows with a ``copy_of`` id in the embeddings shards ``paths`` (0 without the column)."""
    total = 0
    for path in paths:
        with FileSystems.open(path) as handle:
            parquet = pq.ParquetFile(handle)
            if COPY_OF not in parquet.schema_arrow.names:
                continue
            column = parquet.read(columns=[COPY_OF]).column(COPY_OF)
            total += len(column) - column.null_count
    return total
