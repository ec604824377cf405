"""The inputs phase of a dedup run: every input read and checked once, into :class:`DedupInputs`.

:func:`read_inputs` opens the pairs and the embeddings, checks the memory budget from their
manifests, reads the ids, the exact copies, the pairs the sweep needs, the labelled and known
duplicate pairs, the reference (``--against``), the previous version in the output folder and,
with ``--corpus``, scans the corpus once (the order rank, the texts). Nothing later opens an
input again; everything that can fail on the inputs fails here, before the output is touched.

The *order rank* decides ``first`` and every tie: corpus order (file, then row) when the corpus
is known (``--corpus``, or ids derived as ``file:row``), else id order. Texts come from the
corpus scan or from embeddings written with ``--keep-text``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.dedup.against import Reference, open_reference
from sbert_pipeline.dedup.corpus import CorpusScan, scan_corpus
from sbert_pipeline.dedup.known import KnownDuplicates, load_known
from sbert_pipeline.dedup.options import Options, run_deciding_settings
from sbert_pipeline.dedup.sources import (
    LabelColumns,
    PairSource,
    check_count,
    check_dedup_memory,
    embed_error_ids,
    embedding_ids,
    load_labels,
    load_pairs,
    no_pairs,
    open_embeddings,
    rows_naming,
)
from sbert_pipeline.dedup.versions import Stability, embedded_texts, previous_index, read_previous
from sbert_pipeline.grouping.compare import MethodSettings
from sbert_pipeline.grouping.copies import TextCopies
from sbert_pipeline.grouping.item_ids import ItemIds
from sbert_pipeline.grouping.labels import LabelledPairs
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.ranking import corpus_ranks, derived_id_ranks, id_ranks
from sbert_pipeline.grouping.sweep import sweep_thresholds
from sbert_pipeline.io.corpus_reader import CorpusSpec
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.pairs_output import PairsOutput
from sbert_pipeline.io.record_limits import COPY_OF
from sbert_pipeline.io.texts import recorded_corpus_spec, texts_from_embeddings
from sbert_pipeline.stage_api.shared_options import checked_memory_budget

logger = logging.getLogger(__name__)


def paired_items(n: int, pairs: IndexedPairs, threshold: float) -> np.ndarray:
    """``(n,)`` bool: items with a pair at or above the threshold (every group member has one)."""
    used = pairs.above(threshold)
    return np.bincount(np.concatenate([used.a, used.b]), minlength=n) > 0


def corpus_spec(
    datasets: list[EmbeddingsDataset],
    fmt: str | None = None,
    text_field: str | None = None,
    id_field: str | None = None,
) -> CorpusSpec:
    """How the embed job read the corpus, with this run's overrides (None: as recorded)."""
    return recorded_corpus_spec(datasets[0].manifest, fmt, text_field, id_field)


def order_rank(
    ids: pa.Array, datasets: list[EmbeddingsDataset], scan: CorpusScan | None
) -> tuple[np.ndarray, str]:
    """The order rank behind ``first`` and every tie, and what it is, in words."""
    if scan is not None:
        return corpus_ranks(scan.positions), "corpus order (file, then row)"
    derived = all(d.manifest.get("input", {}).get("id_field", "") is None for d in datasets)
    if derived:
        rank = derived_id_ranks(ids)
        if rank is not None:
            return rank, "corpus order (file, then row, from the derived file:row ids)"
    return id_ranks(ids), "id order (the corpus order is unknown without --corpus)"


def item_texts(
    datasets: list[EmbeddingsDataset],
    scan: CorpusScan | None,
    ids: Sequence[str],
    wanted: np.ndarray,
) -> tuple[dict[str, str], str | None]:
    """Texts of the ``wanted`` items (``(n,)`` bool) and where they came from (None: nowhere).

    With a corpus scan the texts are those the scan kept (it was asked for the same items).
    """
    if scan is not None:
        return scan.texts, scan.pattern
    with_text = [dataset for dataset in datasets if dataset.has_text]
    if not with_text:
        return {}, None
    found = texts_from_embeddings(with_text, set(ItemIds.of(ids).take(np.flatnonzero(wanted))))
    return found, ", ".join(d.directory for d in with_text)


def text_lengths(texts: dict[str, str], ids: ItemIds, n: int) -> np.ndarray:
    """``(n,)`` int64 characters per item, -1 where the text is unknown."""
    lengths = np.full(n, -1, np.int64)
    if texts:
        rows = ids.rows_of(texts)
        known = rows >= 0  # texts of other rows (none today) are not this run's items
        lengths[rows[known]] = np.array([len(text) for text in texts.values()])[known]
    return lengths


def read_copies(datasets: list[EmbeddingsDataset], ids: pa.Array) -> TextCopies:
    """The copies named by the embeddings' ``copy_of`` column (none without the column).

    Args:
        datasets: the embeddings, in the order their ids were read.
        ids: every embedded id (row ``i`` is item ``i``).

    Raises:
        ValueError: a ``copy_of`` names an id that is not embedded.
    """
    copy_ids, rows = [], []
    for _, named in rows_naming(datasets, COPY_OF):
        copy_ids.append(named["id"].combine_chunks())
        rows.append(named[COPY_OF].combine_chunks())
    copy_of = np.full(len(ids), -1, np.int64)
    if not copy_ids:
        return TextCopies(copy_of)
    copies = pc.index_in(pa.concat_arrays(copy_ids).cast(pa.string()), value_set=ids)
    heads = pc.index_in(pa.concat_arrays(rows).cast(pa.string()), value_set=ids)
    if heads.null_count:
        missing = pa.concat_arrays(rows).filter(pc.is_null(heads))
        raise ValueError(
            f"{len(missing)} rows of the embeddings are copies of ids that are not embedded "
            f"(first: {missing[0].as_py()!r}); the embeddings are incomplete"
        )
    copy_of[copies.to_numpy(zero_copy_only=False)] = heads.to_numpy(zero_copy_only=False)
    return TextCopies(copy_of)


@dataclass(frozen=True)
class DedupInputs:
    """Everything a dedup run reads, read once, before the output folder is touched.

    ``ids`` is one Arrow array (Python strings for 5M rows cost ~1 GiB); ``rank`` is the order
    rank (corpus order, else id order) that decides ``first`` and every tie.
    """

    options: Options
    settings: MethodSettings  # built once from the options and the pairs' threshold
    keep: str  # the member the chosen method keeps
    pairs_output: PairsOutput | None
    datasets: list[EmbeddingsDataset]
    memory: dict
    ids: ItemIds
    copies: TextCopies
    source: PairSource
    labelled: LabelledPairs | None
    known: KnownDuplicates | None
    reference: Reference | None
    stability: Stability
    corpus: CorpusSide

    @property
    def n(self) -> int:
        """Corpus rows (every embedded id)."""
        return len(self.ids)


@dataclass(frozen=True)
class CorpusSide:
    """The corpus order, the texts and the corpus scan of a run's grouped rows."""

    grouped: np.ndarray  # (n,) bool: rows in a group at the threshold (or copies, matches)
    index: dict[str, int] | None  # id -> row, only for the corpus scan
    scan: CorpusScan | None
    rank: np.ndarray
    order_basis: str
    texts: dict[str, str]
    text_source: str | None
    lengths: np.ndarray


def read_inputs(options: Options) -> DedupInputs:
    """Open and check every input of ``options`` (the four phases' first).

    Raises:
        ValueError, FileNotFoundError, IncompatibleEmbeddingsError: bad inputs, found before
            anything is written.
    """
    if options.labels is not None and not FileSystems.exists(options.labels):
        raise FileNotFoundError(f"--labels {options.labels}: no such file")
    pairs_output = None if options.pairs is None else PairsOutput.open(options.pairs)
    datasets = (
        EmbeddingsDataset.open_many(list(options.embeddings))
        if pairs_output is None
        else open_embeddings(pairs_output, list(options.embeddings) or None)
    )
    settings = options.method_settings(None if pairs_output is None else pairs_output.threshold)
    # From the manifests and Parquet footers only: refused before any pair or id is read.
    budget = checked_memory_budget(options.memory_budget)
    compared = None if options.dry_run else options.output  # a previous version there counts
    memory = check_dedup_memory(budget, pairs_output, datasets, options.threshold, compared)
    keep = options.keep_policy
    needs_text = keep == "longest"
    if needs_text and options.corpus is None and not all(d.has_text for d in datasets):
        raise ValueError(
            "--keep longest needs the texts: the embeddings were written without --keep-text, "
            "so pass the corpus with --corpus GLOB"
        )
    ids = embedding_ids(datasets)
    if pairs_output is not None:
        check_count(pairs_output, len(ids))
    copies = read_copies(datasets, ids)  # rows of exact-copy embeddings: joined after grouping
    source = _pairs(options, settings, pairs_output, ids, copies)
    labelled = _labels(options, ids)
    known = load_known(datasets, options.known_field, ids, labelled, options.labels)
    id_list = ItemIds(ids)
    reference = (
        open_reference(options.against, datasets, id_list, options.threshold)
        if options.against
        else None
    )
    stability = read_previous(
        None if options.dry_run else options.output,
        options.stable_mode,
        datasets[0].manifest,
        run_deciding_settings(options, settings),
    )
    logger.info("stable keep: %s", stability.reason)
    rows = _Rows(id_list, source, copies, reference, known)
    corpus = _corpus_side(options, settings, datasets, rows, needs_text)
    return DedupInputs(
        options, settings, keep, pairs_output, datasets, memory, id_list, copies, source,
        labelled, known, reference, stability, corpus,
    )  # fmt: skip


def _pairs(options, settings, pairs_output, ids: pa.Array, copies: TextCopies) -> PairSource:
    """The pairs the sweep and the threshold need, without the copies' pairs."""
    thresholds = sweep_thresholds(
        options.sweep_from, options.sweep_to, options.sweep_step, options.threshold
    )
    if settings.missing_score > min(thresholds):
        raise ValueError(
            f"--missing-score {settings.missing_score:g} is above the lowest sweep threshold "
            f"{min(thresholds):g}: average linkage would merge clusters that share no pair"
        )
    reach = min(settings.radius_at(t) for t in thresholds)
    loading = time.perf_counter()
    source = (
        load_pairs(pairs_output, ids, options.threshold, thresholds, reach)
        if pairs_output is not None
        else no_pairs(thresholds)
    )
    logger.info("read %s pairs in %.1f s", f"{len(source.pairs):,}", time.perf_counter() - loading)
    source = dataclasses.replace(source, pairs=copies.distinct(source.pairs))
    for note in source.notes:
        logger.warning("%s", note)
    return source


def _labels(options: Options, ids: pa.Array) -> LabelledPairs | None:
    """The labelled pairs of ``--labels``, mapped to the items (None without)."""
    if options.labels is None:
        return None
    columns = LabelColumns(options.label_id_a, options.label_id_b, options.label_field)
    return load_labels(options.labels, columns, ids, skip_unknown=options.skip_unknown_labels)


@dataclass(frozen=True)
class _Rows:
    """What decides which rows the corpus side reads."""

    ids: ItemIds
    source: PairSource
    copies: TextCopies
    reference: Reference | None
    known: KnownDuplicates | None


def _corpus_side(options, settings, datasets, rows: _Rows, needs_text: bool) -> CorpusSide:
    """The grouped rows, the corpus scan (with ``--corpus``), the order rank and the texts."""
    n, pairs = len(rows.ids), rows.source.pairs
    grouped = paired_items(n, pairs, options.threshold) | rows.copies.grouped_rows()
    if rows.reference is not None:  # the corpus rows that match a reference row are grouped
        grouped = grouped | rows.reference.matched
    rank_by_length = settings.keep == "longest"  # at every threshold of the sweep
    wanted = paired_items(n, pairs, rows.source.thresholds[0]) if rank_by_length else grouped
    if rows.known is not None:  # the report shows the known pairs the groups split, with texts
        wanted = wanted | rows.known.rows(n)
    # Only the corpus scan looks ids up one at a time; everything else asks Arrow (rows_of).
    index = rows.ids.index() if options.corpus else None
    scan = _scan(options, datasets, index, wanted, settings.column) if options.corpus else None
    rank, order_basis = order_rank(rows.ids.array, datasets, scan)
    # A dry run reads texts only when the ranking needs their lengths (the report shows them).
    texts, text_source = (
        item_texts(datasets, scan, rows.ids, wanted)
        if needs_text or not options.dry_run
        else ({}, None)
    )
    lengths = text_lengths(texts, rows.ids, n)
    return CorpusSide(grouped, index, scan, rank, order_basis, texts, text_source, lengths)


def _scan(options: Options, datasets, index: dict[str, int], wanted: np.ndarray, column):
    """The corpus rows of the grouped items (texts, order, the ranking column); files the
    previous version's corpus index holds unchanged are not parsed again."""
    spec = corpus_spec(datasets, options.format, options.text_field, options.id_field)
    logger.info("reading the corpus %s", options.corpus)
    previous = previous_index(None if options.dry_run else options.output, spec)
    scan = scan_corpus(
        options.corpus, spec, index, wanted, lambda: embed_error_ids(datasets), column,
        previous=previous, fetch_texts=embedded_texts(datasets, spec),
    )  # fmt: skip
    logger.info("corpus files: %(reused)d unchanged (from its index), %(parsed)d read", scan.counts)
    return scan
