"""The dedup stage: duplicate groups from the similar pairs of ``sbert pairs``, one row kept each.

Run from Python as ``dedup.run(dedup.Options(pairs=..., output=..., threshold=...))`` or as
``sbert dedup``.

Methods (docs/architecture.md, "dedup methods"); every member of a group but its
representative is removed, and an item with no pair >= T is kept:

* ``star`` (the default): the connected components of the pairs >= T, each cut into stars: in
  rank order, an item joins the most similar kept, better-ranked item of its component whose
  score is >= the radius (default T - 0.10, never below the pairs stage's threshold), else it
  is kept. Tight components stay whole; chains (A ~ B ~ C ~ ... over distinct questions) are
  cut. It is the default because components chain as corpora grow: on Quora question pairs
  (158,678 questions, human labels) components reach pair-F1 0.772 but with a largest group of
  1,210 questions at T = 0.81 (1,911 at 0.80), star 0.754 with a largest group of 265 at 0.80.
* ``components``: the connected components themselves (the only method before; its output is
  unchanged).
* ``ranked``: SemDeDup's rule as in NeMo Curator: an item is removed when a kept, better-ranked
  item is >= T to it. Groups cannot chain, recall is lower.
* ``split``: components whose members are not all >= the radius to the best-ranked member are
  split at T + 0.01, T + 0.02, ... until they are.
* ``mutual``: components over the pairs >= T whose ends are among each other's --mutual-k
  nearest neighbours.
* ``average``: average-linkage clustering, merging while the mean score between two clusters
  is >= T (a pair not loaded counts as --missing-score).

Every method keeps the member ``--keep`` ranks first: ``first`` (first in the corpus: by file,
then row, when the corpus is known from ``--corpus`` or derived ``file:row`` ids; else by id),
``longest`` (most characters), ``central`` (the member most like the most others: the largest
sum of scores of its pairs >= T, which in a component is the highest mean similarity to the
other members, a pair under T counting as 0), ``random`` (``--seed``) or ``column:NAME`` (a
numeric corpus field, largest first; needs ``--corpus``); ties to the first. Without it,
components keep ``first`` and the other methods ``central``. ``--rank`` (and its value
``corpus``, for ``first``) is the old spelling of ``--keep`` for the methods but components,
still accepted.

The items are all the embedded ids the pairs were computed from (the embeddings named in the
pairs manifest, or ``--embeddings``), so ``rows in == kept + removed`` always. The pairs must
reach down to T (and the radius): ``pairs/`` holds every pair down to the pairs job's
threshold; below it, the pairs are taken from the top-k neighbour lists (``neighbors/``), which
miss pairs of an item with more than k near neighbours (a warning says so; the sweep marks
such thresholds).

With ``--labels FILE`` (labelled pairs: two id columns and a 0/1 label; TSV, CSV, JSONL or
Parquet) every method at every sweep threshold is scored: pair precision, recall and F1 of
"both in one group" on the labelled pairs only, the best-F1 threshold and, with
``--target-precision P``, the threshold of highest recall whose precision is >= P; the numbers
go to the manifest, the report gets a precision-recall curve.

Known duplicates: when the embeddings kept a ``duplicate_of`` field (``sbert embed
--keep-fields duplicate_of``; another field with ``--known-duplicates-field F``) naming, on a
duplicate's row, the id of the row it duplicates, each such row gives a known duplicate pair
(without the field, the labelled duplicates of ``--labels`` are the known pairs). The summary
line, the report and the manifest (``known_duplicates``) give how many known pairs ended in one
group (known-duplicate recall) for every method at every sweep threshold, and list some the
groups split; with ``--labels`` also the precision on the labelled pairs.

Outputs (docs/architecture.md, ``dedup/``): ``groups.parquet`` (id, group, is_representative,
size, score to the representative), ``kept_ids.txt`` and ``removed_ids.txt`` (one id per line in
corpus or id order; backslash, LF and CR in ids escaped as \\\\, \\n, \\r), ``report.html`` and
``_manifest.json``, written last. With ``--corpus GLOB --apply`` also ``corpus/`` (the kept rows
of every corpus file, same relative path and format) and ``corpus_rejected.parquet`` (the rows
the embed job did not embed, with the reason; they are not in ``corpus/``).

Stable decisions (``--stable-keep auto``, the default; pipelines/dedup/previous.py): when
``--output`` holds a dedup version made with the same settings that decide groups, every row
it kept that still exists stays kept (pinned; pipelines/dedup/pinning.py) and the others join
their most similar pinned row. A changed setting decides afresh (``on`` pins anyway, ``off``
never); never across another model identity; the line and ``stable_keep`` say why. Groups
with a previous group's members keep its id; others get ids above the previous largest. The
manifest's ``changes``, the report and the summary line say what changed since that version.

Against a reference (``--against REF_EMBEDDINGS``; pipelines/dedup/against.py): every corpus
row whose cosine with a reference row is >= T is removed (exact corpus x reference search),
grouped with its most similar reference row; reference rows are pinned, marked in
``groups.parquet`` (``reference``) and never in the id lists. Without ``--pairs`` (corpus:
``--embeddings``) nothing else is removed; with it, a corpus group holding such a row is
removed whole.

The threshold sweep runs the chosen method only (``--sweep chosen``, the default); ``--sweep
all`` runs every method at every threshold for the comparison (the report's "every method"
table, the manifest's ``methods``, with ``--labels`` every method's calibration). One progress
line counts every (method, threshold) point, with one ETA for the whole sweep.

Memory: the pairs are columns (row numbers and scores), so a run needs about
``sbert_pipeline.dedup.budget.dedup_memory(rows, pairs)``; it is refused before any pair is read
when that is over ``--memory-budget`` (default: most of the memory available), and the manifest's
``memory`` records the estimate, the budget and the measured peak RSS.

``--dry-run`` prints the threshold sweep (the chosen method's counts from --sweep-from to
--sweep-to, plus T, then, with ``--sweep all``, every method's removed rows and largest group,
with labels F1) and writes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.dedup.against import open_reference
from sbert_pipeline.dedup.budget import check_memory
from sbert_pipeline.dedup.choices import KEEP_POLICIES, METHODS
from sbert_pipeline.dedup.copies import read_copies, reason_column
from sbert_pipeline.dedup.corpus import CORPUS_DIR, REJECTED_FILE, apply_corpus, scan_corpus
from sbert_pipeline.dedup.corpus_index import (
    INDEX_FILE,
    embedded_texts,
    previous_index,
    write_index,
)
from sbert_pipeline.dedup.decisions import changes_html, decide, reference_texts, shown_ids
from sbert_pipeline.dedup.dedup_summary import DedupSummary
from sbert_pipeline.dedup.deduplicate import deduplicate
from sbert_pipeline.dedup.groups import similarity_histogram, sweep_thresholds
from sbert_pipeline.dedup.inputs import embed_error_ids, embedding_ids, open_embeddings
from sbert_pipeline.dedup.item_ids import ItemIds
from sbert_pipeline.dedup.known import known_found, load_known
from sbert_pipeline.dedup.labels import LabelColumns, LabelledPairs, load_labels
from sbert_pipeline.dedup.load import check_count, load_pairs, no_pairs
from sbert_pipeline.dedup.manifest import dedup_manifest
from sbert_pipeline.dedup.options import Options
from sbert_pipeline.dedup.order import (
    corpus_spec,
    item_texts,
    order_rank,
    paired_items,
    text_lengths,
)
from sbert_pipeline.dedup.outputs import (
    GROUPS_FILE,
    KEPT_FILE,
    REMOVED_FILE,
    REPORT_FILE,
    groups_table,
    largest_groups,
    reference_column,
    write_id_lists,
    write_report,
)
from sbert_pipeline.dedup.previous import changes, pinned_rows, read_previous, stable_group_ids
from sbert_pipeline.dedup.report_methods import KnownView, known_view
from sbert_pipeline.dedup.run_settings import check_settings, run_deciding_settings, settings_of
from sbert_pipeline.dedup.sweep import Ranker, group_at, sweep_methods
from sbert_pipeline.io.atomic import write_table
from sbert_pipeline.io.content_checks import content_checks
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import OutputLayout, join
from sbert_pipeline.io.pairs_output import PairsOutput
from sbert_pipeline.io.resources import peak_rss
from sbert_pipeline.stage_api.beam_run import show_progress
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.stage_api.shared_options import checked_memory_budget
from sbert_pipeline.stage_api.stage_output import stage_output
from sbert_pipeline.stage_api.stops import JobFailedError

__all__ = ["DedupResult", "run"]

logger = logging.getLogger(__name__)

PINNED_NOTE = (
    "the sweep and the method comparison group the corpus pairs without the pinned rows "
    "(--stable-keep, --against); the counts at the threshold include them"
)
# The manifest's ``incremental`` section (the same shape in every stage, issue 28).
FULL_REASON = (
    "dedup recomputes its groups from the full pairs (cheap); with the previous version's "
    "settings (or --stable-keep on) it pins the rows that version kept (stable_keep, changes)"
)

# What a dedup run writes (see docs/architecture.md, ``dedup/``).
LAYOUT = OutputLayout(
    files=(
        GROUPS_FILE,
        KEPT_FILE,
        REMOVED_FILE,
        REPORT_FILE,
        REJECTED_FILE,
        INDEX_FILE,
        f"{CORPUS_DIR}/*",
    )
)


@dataclass(frozen=True)
class DedupResult(Result):
    """A dedup run's :class:`Result`; a dry run has no output folder and no manifest."""

    output: str | None
    summary: DedupSummary

    def line(self) -> str:
        """The summary line; for a dry run the threshold sweep first (what it is run for)."""
        if self.summary.dry_run:
            return "\n".join([*self.summary.sweep_lines(), self.summary.line()])
        return self.summary.line()


def run(options: Options, *, pipeline: object = None) -> DedupResult:
    """Group the duplicates, choose the kept rows, write the outputs (unless ``dry_run``).

    Dedup runs in this process (the grouping is sequential), so unlike the other stages it
    takes no Beam options and runs no pipeline: ``pipeline`` is accepted for the common stage
    signature and must be None.

    Raises:
        ValueError, FileNotFoundError, IncompatibleEmbeddingsError, OutputExistsError: bad
            options or inputs, found before anything is written.
        JobFailedError: the counts do not add up (rows in != kept + removed); no manifest.
    """
    if pipeline is not None:
        raise ValueError("dedup runs in this process: it takes no Beam pipeline")
    with content_checks(options.verify):
        return _run(options)


def _run(options: Options) -> DedupResult:
    """:func:`run` within the content checks."""
    if options.labels is not None and not FileSystems.exists(options.labels):
        raise FileNotFoundError(f"--labels {options.labels}: no such file")
    show_progress()  # dedup runs in this process
    start = time.perf_counter()
    pairs_output = None if options.pairs is None else PairsOutput.open(options.pairs)
    datasets = (
        EmbeddingsDataset.open_many(list(options.embeddings))
        if pairs_output is None
        else open_embeddings(pairs_output, list(options.embeddings) or None)
    )
    settings = settings_of(options, None if pairs_output is None else pairs_output.threshold)
    # From the manifests and Parquet footers only: refused before any pair or id is read.
    budget = checked_memory_budget(options.memory_budget)
    compared = None if options.dry_run else options.output  # a previous version there counts
    memory = check_memory(budget, pairs_output, datasets, options.threshold, compared)
    # The chosen method keeps by ``keep``; the other methods of the sweep by settings.keep (the
    # same unless --keep was left to each method's default).
    keep = options.keep_for(options.method)
    rank_by_length = settings.keep == "longest"  # at every threshold of the sweep
    needs_text = keep == "longest" or rank_by_length
    if needs_text and options.corpus is None and not all(d.has_text for d in datasets):
        raise ValueError(
            "--keep longest needs the texts: the embeddings were written without --keep-text, "
            "so pass the corpus with --corpus GLOB"
        )
    ids = embedding_ids(datasets)
    if pairs_output is not None:
        check_count(pairs_output, len(ids))
    copies = read_copies(datasets, ids)  # rows of --exact-dedup embeddings: joined after grouping
    thresholds = sweep_thresholds(
        options.sweep_from, options.sweep_to, options.sweep_step, options.threshold
    )
    check_settings(settings, thresholds)
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
    labelled = _labels(options, ids)
    known = load_known(datasets, options.known_duplicates_field, ids, labelled, options.labels)

    # Everything that can fail on the inputs happens before the output directory is touched.
    # Ids stay one Arrow array: Python strings for 5M rows cost ~1 GiB (item_ids.py).
    n, id_list = len(ids), ItemIds(ids)
    reference = (
        open_reference(options.against, datasets, id_list, options.threshold)
        if options.against
        else None
    )
    grouped = paired_items(n, source.pairs, options.threshold) | copies.grouped_rows()
    if reference is not None:  # the corpus rows that match a reference row are grouped too
        grouped = grouped | reference.matched
    wanted = paired_items(n, source.pairs, source.thresholds[0]) if rank_by_length else grouped
    if known is not None:  # the report shows the known pairs the groups split, with texts
        wanted = wanted | known.rows(n)
    # Only the corpus scan looks ids up one at a time; everything else asks Arrow (rows_of).
    index = id_list.index() if options.corpus else None
    # Read before the output is prepared: --overwrite replaces it.
    stability = read_previous(
        None if options.dry_run else options.output,
        options.stable_keep,
        datasets[0].manifest,
        run_deciding_settings(options, settings),
    )
    logger.info("stable keep: %s", stability.reason)
    scan = _scan(options, datasets, index, wanted, settings.column) if options.corpus else None
    rank, order_basis = order_rank(ids, datasets, scan)
    # A dry run reads texts only when the ranking needs their lengths (the report shows them).
    texts, text_source = (
        item_texts(datasets, scan, id_list, wanted)
        if needs_text or not options.dry_run
        else ({}, None)
    )
    lengths = text_lengths(texts, id_list, n)
    values = None if scan is None else scan.values
    ranker = Ranker(settings, n, source.pairs, rank, lengths, values)
    sweeps = sweep_methods(
        settings,
        source.pairs,
        source.thresholds,
        ranker,
        labelled,
        methods=METHODS if options.sweep == "all" else (options.method,),
        copies=copies,
        known=None if known is None else known.pairs,
    )
    if options.method == "components":
        # first, longest and central are computed from the components; the other policies
        # are the rankings the other methods keep by.
        preference = None if keep in KEEP_POLICIES else ranker(options.threshold)
        groups = deduplicate(
            n,
            source.pairs,
            options.threshold,
            keep,
            rank=rank,
            text_lengths=lengths,
            preference=preference,
        )
    else:
        groups = group_at(options.method, settings, source.pairs, options.threshold, ranker)
    groups = copies.join(groups, rank)
    radius = settings.radius_at(options.threshold) if options.method in ("star", "split") else None
    decided = decide(
        groups,
        rank,
        source.pairs,
        options.threshold if radius is None else radius,
        pinned_rows(stability, id_list, n),
        reference,
    )
    groups = decided.grouping
    every_id, shown = shown_ids(ids, reference)
    all_ids = id_list if reference is None else ItemIds(every_id)  # as groups.parquet has them
    if reference is not None:
        texts = {**texts, **reference_texts(reference, decided, shown)}
    facts = dict(
        threshold=options.threshold,
        keep=keep,
        rows_in=n,
        groups=groups.n_groups,
        largest=groups.largest,
        sweep=sweeps[0].points,
        limited=[source.limited(point.threshold) for point in sweeps[0].points],
        notes=source.notes + ([PINNED_NOTE] if decided.pinned.any() else []),
        method=options.method,
        radius=radius,
        sweeps=sweeps,
        target_precision=options.target_precision,
        copies=copies.n_copies if copies.n_copies else None,
        known=None if known is None else known_found(groups.group[:n], known),
        against=None if reference is None else reference.to_json(),
    )
    if options.dry_run:
        removed = groups.n_removed
        summary = DedupSummary(
            output=None,
            dry_run=True,
            kept=n - removed,
            removed=removed,
            seconds=time.perf_counter() - start,
            **facts,
        )
        return DedupResult(output=None, manifest={}, summary=summary)

    out = stage_output("dedup", options, LAYOUT)
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    folder = out.attempt
    with out:
        group_ids = stable_group_ids(groups, all_ids, stability.previous)
        table = groups_table(every_id, groups, decided.rank, groups.matched_score, group_ids)
        if copies.n_copies:  # otherwise groups.parquet keeps its schema
            table = reason_column(table, every_id, groups.reason)
        if reference is not None:
            table = reference_column(table, every_id, decided.reference_column())
        write_table(join(folder, GROUPS_FILE), table)
        n_kept, n_removed = write_id_lists(folder, id_list, decided.corpus_kept, rank)
        if n_kept + n_removed != n or n_removed != groups.n_removed:
            raise JobFailedError(
                f"rows in ({n}) != kept ({n_kept}) + removed ({n_removed}; expected "
                f"{groups.n_removed}); {folder} has no manifest and must not be used"
            )
        scanned = None if scan is None else write_index(folder, scan)
        corpus = (
            apply_corpus(folder, scan, index, decided.corpus_kept, groups.n_removed)
            if options.apply
            else None
        )
        summary = DedupSummary(
            output=options.output,
            dry_run=False,
            kept=n_kept,
            removed=n_removed,
            seconds=time.perf_counter() - start,
            corpus=corpus,
            changes=changes(groups, all_ids, decided.corpus_kept, stability.previous),
            stable=None if stability.previous is None else stability.reason,
            **facts,
        )
        report_facts = {
            "pairs": options.pairs or "none (--against only)",
            "model": datasets[0].manifest.get("model_id"),
            "first means": order_basis,
            "texts from": text_source or "none (ids shown)",
        }
        # The histogram's bins are 0.01 wide and start at or below 0.99, so there is always a bin.
        histogram = similarity_histogram(source.pairs.scores, min(source.low, 0.99))
        views = largest_groups(
            groups,
            options.report_groups,
            shown,
            decided.rank,
            groups.matched_score,
            texts,
            group_ids,
        )
        label_counts = labelled.to_json() if labelled is not None else None
        known_shown = _known_view(known, groups, summary, source, id_list, texts)
        stable = stability.to_json(int(decided.pinned[:n].sum()))
        write_report(
            folder,
            summary,
            groups,
            report_facts,
            histogram,
            views,
            label_counts,
            known_shown,
            first_sections=[changes_html(summary.changes, stable)],
        )
        manifest = dedup_manifest(
            options,
            settings,
            pairs_output,
            datasets,
            source,
            groups,
            summary,
            histogram,
            labelled,
            known_shown,
        )
        manifest["first_order"] = order_basis
        if scanned is not None:
            manifest["corpus"]["index"] = scanned
        manifest["stable_keep"] = stable
        manifest["changes"] = summary.changes
        manifest["against"] = summary.against
        manifest["incremental"] = {"mode": "full", "reason": FULL_REASON}
        manifest["memory"] = {**memory, "peak_rss_bytes": peak_rss()}
        if copies.n_copies:
            manifest["exact_copies"] = copies.to_json()
        manifest["texts"] = {
            "source": text_source,
            "grouped": int(grouped.sum()),
            "found": len(texts),
        }
        written = out.commit(manifest)
        return DedupResult(output=options.output, manifest=written, summary=summary)


def _known_view(known, groups, summary: DedupSummary, source, ids, texts) -> KnownView | None:
    """The known duplicates at the threshold as the report and the manifest show them."""
    if known is None:
        return None
    point = summary.at_threshold()  # labelled precision, when there are labels
    precision = None if point is None else point.precision
    return known_view(
        known, groups.group, summary.method, precision, source.pairs, ids, texts, source.low
    )


def _labels(options: Options, ids) -> LabelledPairs | None:
    """The labelled pairs of ``--labels``, mapped to the items (None without)."""
    if options.labels is None:
        return None
    columns = LabelColumns(options.label_id_a, options.label_id_b, options.label_column)
    return load_labels(options.labels, columns, ids, skip_unknown=options.skip_unknown_labels)


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
