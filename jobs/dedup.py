"""``sbert dedup``: duplicate groups from the similar pairs of ``sbert pairs``, one row kept each.

    sbert dedup --pairs DIR --output DIR --threshold T [--keep first|longest|central]
        [--corpus GLOB [--apply] [--id-field F] [--text-field F] [--format FMT]]
        [--embeddings DIR ...] [--sweep-from 0.8] [--sweep-to 0.99] [--sweep-step 0.01]
        [--report-groups 50] [--dry-run] [--overwrite]

Groups are the connected components of the pairs with score >= T (compared in float32); an
item with no such pair is a singleton, not a group, and is kept. Each group keeps one
representative:

* ``first``: the member that comes first in the corpus: by file (in path order), then row, when
  the corpus is known (``--corpus``, or ids derived as ``file:row`` because the embed job had no
  id field); otherwise by id (code point order). The row order of the embeddings is not used:
  the embed job shuffles rows between workers, so it is not the corpus order.
* ``longest``: the member with the longest text (texts from the embeddings if they were written
  with ``--keep-text``, else from ``--corpus``), ties to the first.
* ``central``: the member with the highest mean similarity to the other members, counting a pair
  under T as 0 (its score is not known from the pairs), ties to the first.

The items are all the embedded ids the pairs were computed from (the embeddings named in the
pairs manifest, or ``--embeddings``), so ``rows in == kept + removed`` always. The pairs must
reach down to T: ``pairs/`` holds every pair down to the pairs job's threshold; below it, the
pairs are taken from the top-k neighbour lists (``neighbors/``), which miss pairs of an item
with more than k near neighbours (a warning says so; the sweep marks such thresholds).

Outputs (DESIGN.md ``dedup/``): ``groups.parquet`` (id, group, is_representative, size, score
to the representative), ``kept_ids.txt`` and ``removed_ids.txt`` (one id per line in the order
used by ``first``; backslash, LF and CR in ids escaped as \\\\, \\n, \\r), ``report.html`` and
``_manifest.json``, written last. With ``--corpus GLOB --apply`` also ``corpus/`` (the kept rows
of every corpus file, same relative path and format) and ``corpus_rejected.parquet`` (the rows
the embed job did not embed, with the reason; they are not in ``corpus/``).

``--dry-run`` prints the threshold sweep (rows removed at each threshold from --sweep-from to
--sweep-to, plus T) and writes nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import asdict, dataclass, field

import apache_beam as beam
import numpy as np
import pyarrow as pa

from jobs.errors import JobFailedError
from pipelines.dedup.corpus import (
    REJECTED_FILE,
    CorpusScan,
    scan_corpus,
    write_deduplicated_corpus,
)
from pipelines.dedup.files import (
    GROUPS_FILE,
    ID_LIST_ENCODING,
    KEPT_FILE,
    REMOVED_FILE,
    PairColumns,
    PairsOutput,
    embed_error_ids,
    embedding_ids,
    groups_table,
    open_embeddings,
    write_id_list,
    write_table,
)
from pipelines.dedup.groups import (
    KEEP_POLICIES,
    DuplicateGroups,
    Histogram,
    IndexedPairs,
    SweepPoint,
    corpus_ranks,
    deduplicate,
    derived_id_ranks,
    id_ranks,
    index_pairs,
    representative_scores,
    similarity_histogram,
    sweep_thresholds,
    threshold_sweep,
)
from pipelines.dedup.report import GroupView, group_views, report_html
from pipelines.io.corpus_reader import CorpusSpec
from pipelines.io.embeddings import MODEL_FIELDS, EmbeddingsDataset
from pipelines.io.html import write_text
from pipelines.io.output_dir import OutputLayout, join
from pipelines.io.staged_output import prepare_output
from pipelines.io.texts import texts_from_embeddings
from sbert_core import __version__
from sbert_core.tabular import FORMATS

logger = logging.getLogger(__name__)

CORPUS_DIR = "corpus"
REPORT_FILE = "report.html"
# What a dedup run writes (see DESIGN.md, data contracts).
LAYOUT = OutputLayout(
    files=(GROUPS_FILE, KEPT_FILE, REMOVED_FILE, REPORT_FILE, REJECTED_FILE, f"{CORPUS_DIR}/*")
)

# Members listed per group in the report; the rest are in groups.parquet.
REPORT_MEMBERS = 20


@dataclass(frozen=True)
class PairSource:
    """The pairs loaded for the threshold and the sweep, and what they can answer."""

    pairs: IndexedPairs
    low: float  # every pair with score >= low is loaded (but see limited_below)
    thresholds: list[float]  # the sweep thresholds that can be answered, ascending
    limited_below: float | None  # thresholds under this come from top-k lists (may miss pairs)
    origin: str  # "pairs" or "pairs+neighbors"
    notes: list[str]

    def limited(self, threshold: float) -> bool:
        """Whether pairs at ``threshold`` may be missing (top-k lists only)."""
        if self.limited_below is None:
            return False
        return bool(np.float32(threshold) < np.float32(self.limited_below))


@dataclass(frozen=True)
class DedupSummary:
    """What a finished (or dry) dedup run reports."""

    output: str | None
    dry_run: bool
    threshold: float
    keep: str
    rows_in: int
    kept: int
    removed: int
    groups: int
    largest: int
    sweep: list[SweepPoint]
    limited: list[bool]  # per sweep point: pairs may be missing (top-k lists)
    notes: list[str]
    seconds: float
    corpus: dict | None = field(default=None)

    def line(self) -> str:
        """One-line human summary."""
        if self.dry_run:
            return (
                f"dry run: at threshold {self.threshold:g}, {self.removed} of {self.rows_in} rows "
                f"would be removed ({self.groups} groups, largest {self.largest}); nothing written"
            )
        corpus = ""
        if self.corpus is not None:
            corpus = (
                f"; corpus: wrote {self.corpus['written']} of {self.corpus['rows_read']} rows "
                f"({self.corpus['not_embedded']} not embedded, see {REJECTED_FILE})"
            )
        return (
            f"deduplicated {self.rows_in} rows at threshold {self.threshold:g} (keep "
            f"{self.keep}): {self.groups} groups (largest {self.largest}), kept {self.kept}, "
            f"removed {self.removed}{corpus} in {self.seconds:.1f}s -> {self.output}"
        )

    def sweep_lines(self) -> list[str]:
        """The threshold sweep as a text table, the chosen threshold marked with ``<``."""
        lines = [f"{'threshold':>9} {'pairs':>10} {'groups':>8} {'removed':>8} {'kept':>9} largest"]
        for point, limited in zip(self.sweep, self.limited, strict=True):
            mark = " <" if point.threshold == self.threshold else ""
            flag = " (top-k pairs only: a lower bound)" if limited else ""
            lines.append(
                f"{point.threshold:>9g} {point.pairs:>10} {point.groups:>8} {point.removed:>8} "
                f"{point.kept:>9} {point.largest:>7}{mark}{flag}"
            )
        return lines


def build_parser() -> argparse.ArgumentParser:
    """Job options (dedup runs in this process; it takes no pipeline options)."""
    parser = argparse.ArgumentParser(
        prog="sbert dedup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--pairs", required=True, help="an sbert pairs output directory")
    parser.add_argument("--output", default=None, help="output directory (not with --dry-run)")
    parser.add_argument(
        "--threshold", type=float, required=True, help="cosine at or above which pairs join"
    )
    parser.add_argument(
        "--keep",
        default="first",
        choices=KEEP_POLICIES,
        help="which member of a group is kept (default: first)",
    )
    parser.add_argument(
        "--corpus",
        default=None,
        help="glob of the corpus the embeddings were made from: the corpus order for --keep "
        "first, texts for --keep longest and the report, and the rows --apply writes",
    )
    parser.add_argument(
        "--apply", action="store_true", help="write the deduplicated corpus (needs --corpus)"
    )
    parser.add_argument(
        "--id-field", default=None, help="corpus id field (default: as the embed job read it)"
    )
    parser.add_argument(
        "--text-field", default=None, help="corpus text field (default: as the embed job)"
    )
    parser.add_argument(
        "--format", default=None, choices=FORMATS, help="corpus format (default: as the embed job)"
    )
    parser.add_argument(
        "--embeddings",
        nargs="+",
        default=None,
        help="the embeddings the pairs were computed from, if they moved since (default: as "
        "named in the pairs manifest)",
    )
    parser.add_argument("--sweep-from", type=float, default=0.80, help="lowest sweep threshold")
    parser.add_argument("--sweep-to", type=float, default=0.99, help="highest sweep threshold")
    parser.add_argument("--sweep-step", type=float, default=0.01, help="sweep step")
    parser.add_argument(
        "--report-groups", type=int, default=50, help="largest groups shown in report.html"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the threshold sweep only; write nothing"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    return parser


def run(argv: list[str] | None = None) -> DedupSummary:
    """Group the duplicates, choose the kept rows, write the outputs (unless ``--dry-run``).

    Dedup runs in this process (union-find over the pairs is sequential), so unlike the other
    jobs it takes no pipeline options and no test pipeline.

    Raises:
        ValueError, FileNotFoundError, IncompatibleEmbeddingsError, OutputExistsError: bad
            options or inputs, found before anything is written.
        JobFailedError: the counts do not add up (rows in != kept + removed); no manifest.
    """
    args = build_parser().parse_args(argv)
    _check_options(args)
    start = time.perf_counter()
    pairs_output = PairsOutput.open(args.pairs)
    datasets = open_embeddings(pairs_output, args.embeddings)
    if args.keep == "longest" and args.corpus is None and not all(d.has_text for d in datasets):
        raise ValueError(
            "--keep longest needs the texts: the embeddings were written without --keep-text, "
            "so pass the corpus with --corpus GLOB"
        )
    ids = embedding_ids(datasets)
    _check_count(pairs_output, len(ids))
    thresholds = sweep_thresholds(args.sweep_from, args.sweep_to, args.sweep_step, args.threshold)
    source = load_pairs(pairs_output, ids, args.threshold, thresholds)
    for note in source.notes:
        logger.warning("%s", note)
    sweep = threshold_sweep(len(ids), source.pairs, source.thresholds)
    limited = [source.limited(point.threshold) for point in sweep]
    if args.dry_run:
        chosen = next(p for p in sweep if p.threshold == args.threshold)
        return DedupSummary(
            output=None,
            dry_run=True,
            threshold=args.threshold,
            keep=args.keep,
            rows_in=len(ids),
            kept=chosen.kept,
            removed=chosen.removed,
            groups=chosen.groups,
            largest=chosen.largest,
            sweep=sweep,
            limited=limited,
            notes=source.notes,
            seconds=time.perf_counter() - start,
        )

    # Everything that can fail on the inputs happens before the output directory is touched.
    grouped = _grouped_items(len(ids), source.pairs, args.threshold)
    id_list = ids.to_pylist()
    index = {item: row for row, item in enumerate(id_list)}
    scan = _scan_corpus(args, datasets, index, grouped) if args.corpus else None
    rank, order_basis = _order_rank(id_list, datasets, scan)
    texts, text_source = _texts(datasets, scan, id_list, grouped)
    lengths = np.full(len(ids), -1, np.int64)
    for item, text in texts.items():
        lengths[index[item]] = len(text)
    groups = deduplicate(
        len(ids), source.pairs, args.threshold, args.keep, rank=rank, text_lengths=lengths
    )

    out = prepare_output(
        args.output,
        overwrite=args.overwrite,
        job={"command": "dedup", "argv": argv or sys.argv[1:]},
        layout=LAYOUT,
    )
    # Every write below goes to this run's attempt area; ``out.commit`` publishes it.
    final, args.output = args.output, out.attempt
    with out:
        scores = representative_scores(groups, source.pairs)
        write_table(join(args.output, GROUPS_FILE), groups_table(ids, groups, rank, scores))
        n_kept, n_removed = _write_id_lists(args.output, id_list, groups, rank)
        corpus = _apply(args, scan, index, groups) if args.apply else None
        summary = DedupSummary(
            output=final,
            dry_run=False,
            threshold=args.threshold,
            keep=args.keep,
            rows_in=len(ids),
            kept=n_kept,
            removed=n_removed,
            groups=groups.n_groups,
            largest=groups.largest,
            sweep=sweep,
            limited=limited,
            notes=source.notes,
            seconds=time.perf_counter() - start,
            corpus=corpus,
        )
        facts = {
            "pairs": args.pairs,
            "model": datasets[0].manifest.get("model_id"),
            "first means": order_basis,
            "texts from": text_source or "none (ids shown)",
        }
        # The histogram's bins are 0.01 wide and start at or below 0.99, so there is always a bin.
        histogram = similarity_histogram(source.pairs.scores, min(source.low, 0.99))
        views = _group_views(groups, args.report_groups, id_list, rank, scores, texts)
        _write_report(args.output, summary, groups, facts, histogram, views)
        manifest = _manifest(args, pairs_output, datasets, source, groups, summary, histogram)
        manifest["first_order"] = order_basis
        manifest["texts"] = {
            "source": text_source,
            "grouped": int(grouped.sum()),
            "found": len(texts),
        }
        out.commit(manifest)
        return summary


def _write_id_lists(
    output: str, ids: list[str], groups: DuplicateGroups, rank: np.ndarray
) -> tuple[int, int]:
    """``kept_ids.txt`` and ``removed_ids.txt`` in rank order; checks rows in == kept + removed.

    Raises:
        JobFailedError: the lists do not add up to the rows in.
    """
    by_rank = np.argsort(rank, kind="stable").tolist()
    kept = groups.kept.tolist()
    n_kept = write_id_list(join(output, KEPT_FILE), (ids[row] for row in by_rank if kept[row]))
    n_removed = write_id_list(
        join(output, REMOVED_FILE), (ids[row] for row in by_rank if not kept[row])
    )
    if n_kept + n_removed != len(ids) or n_removed != groups.removed:
        raise JobFailedError(
            f"rows in ({len(ids)}) != kept ({n_kept}) + removed ({n_removed}; expected "
            f"{groups.removed}); {output} has no manifest and must not be used"
        )
    return n_kept, n_removed


def _group_views(
    groups: DuplicateGroups,
    limit: int,
    ids: list[str],
    rank: np.ndarray,
    scores: np.ndarray,
    texts: dict[str, str],
) -> list[GroupView]:
    """The ``limit`` largest groups as the report shows them (at most REPORT_MEMBERS each)."""
    shown = min(limit, groups.n_groups)
    return group_views(
        ids,
        [groups.members(g, rank)[:REPORT_MEMBERS] for g in range(shown)],
        groups.kept,
        scores,
        texts,
        list(range(shown)),
        groups.sizes[:shown].tolist(),
    )


def _write_report(
    output: str,
    summary: DedupSummary,
    groups: DuplicateGroups,
    facts: dict,
    histogram: Histogram,
    views: list[GroupView],
) -> None:
    """``report.html``: the counts, the plots and the largest groups with their texts."""
    counts = {
        "threshold": f"{summary.threshold:g}",
        "keep": summary.keep,
        "rows in": summary.rows_in,
        "kept": summary.kept,
        "removed": summary.removed,
        "groups": summary.groups,
        "largest group": summary.largest,
        "pairs used (score >= threshold)": groups.pairs_used,
    }
    if summary.corpus is not None:
        counts["corpus rows written / read"] = (
            f"{summary.corpus['written']} / {summary.corpus['rows_read']}"
        )
        counts["corpus rows not embedded"] = summary.corpus["not_embedded"]
    page = report_html(
        {**facts, **counts},
        histogram,
        summary.threshold,
        summary.sweep,
        views,
        total_groups=groups.n_groups,
        notes=summary.notes,
    )
    write_text(join(output, REPORT_FILE), page)


def load_pairs(
    pairs_output: PairsOutput, ids: pa.Array, threshold: float, thresholds: list[float]
) -> PairSource:
    """Read the pairs the threshold and the sweep need, from ``pairs/`` or, below the pairs'
    threshold, also from ``neighbors/``.

    Raises:
        ValueError: the threshold is below what ``pairs/`` holds and there are no neighbour
            lists to fall back on.
    """
    floor = pairs_output.threshold
    notes: list[str] = []
    if pairs_output.manifest.get("method") == "clustered":
        recall = pairs_output.manifest.get("recall_at_k")
        notes.append(
            f"the pairs were found by cluster-blocked search (recall@k {recall} against exact "
            "search on a sample): a pair whose items share no block is missing"
        )
    if floor is not None and np.float32(threshold) >= np.float32(floor):
        answerable = [t for t in thresholds if np.float32(t) >= np.float32(floor)]
        if len(answerable) < len(thresholds):
            notes.append(
                f"the sweep starts at {answerable[0]:g}: {pairs_output.directory} holds the "
                f"pairs with score >= {floor:g} only"
            )
        low = answerable[0]
        columns = pairs_output.read_pairs(low)
        return PairSource(index_pairs(ids, *_parts(columns)), low, answerable, None, "pairs", notes)

    if not pairs_output.neighbor_files:
        what = (
            f"the pairs in {pairs_output.directory} hold only scores >= {floor:g}"
            if floor is not None
            else f"{pairs_output.directory} was written without a pairs threshold"
        )
        raise ValueError(
            f"--threshold {threshold:g} cannot be answered: {what}, and it has no neighbour "
            f"lists; rerun sbert pairs with --threshold {threshold:g} or lower, or raise "
            "--threshold"
        )
    low = thresholds[0]
    columns = PairColumns.concat(
        [pairs_output.read_pairs(low), pairs_output.read_neighbor_pairs(low)]
    )
    k = pairs_output.k
    below = f"below {floor:g}" if floor is not None else "at every threshold"
    notes.append(
        f"pairs {below} come from the top-{k if k is not None else 'k'} neighbour lists of "
        f"{pairs_output.directory}: an item with more near neighbours than that may miss some "
        "of its pairs, so groups can be split and the removed counts are lower bounds; rerun "
        f"sbert pairs with --threshold {threshold:g} for exact groups"
    )
    # Without a pairs threshold nothing in pairs/ is known to be complete: every threshold is
    # limited (2 is above any cosine).
    limited_below = floor if floor is not None else 2.0
    pairs = index_pairs(ids, *_parts(columns))
    return PairSource(pairs, low, thresholds, limited_below, "pairs+neighbors", notes)


def _parts(columns: PairColumns):
    return columns.id_a, columns.id_b, columns.scores


def check_options(argv: list[str]) -> None:
    """Check this command's option values without reading inputs or touching any output.

    ``sbert run`` calls it for every stage before running the first one.

    Raises:
        ValueError, FileNotFoundError: a value the command would refuse, naming the option.
    """
    _check_options(build_parser().parse_known_args(argv)[0])


def _check_options(args) -> None:
    """Refuse option values that cannot work, naming the option."""
    if not -1.0 <= args.threshold <= 1.0:
        raise ValueError(f"--threshold is a cosine, in [-1, 1]; got {args.threshold}")
    if args.dry_run and args.apply:
        raise ValueError("--dry-run writes nothing; leave out --apply")
    if not args.dry_run and args.output is None:
        raise ValueError("--output is required (unless --dry-run)")
    if args.apply and args.corpus is None:
        raise ValueError("--apply writes the deduplicated corpus and needs --corpus GLOB")
    if args.report_groups < 0:
        raise ValueError(f"--report-groups must be >= 0, got {args.report_groups}")
    sweep_thresholds(args.sweep_from, args.sweep_to, args.sweep_step)


def _check_count(pairs_output: PairsOutput, n: int) -> None:
    manifest = pairs_output.manifest
    recorded = manifest.get("n", (manifest.get("counts") or {}).get("items"))
    if recorded is not None and int(recorded) != n:
        raise ValueError(
            f"the embeddings hold {n} rows but the pairs in {pairs_output.directory} were "
            f"computed over {recorded}; the embeddings changed since, rerun sbert pairs"
        )


def _grouped_items(n: int, pairs: IndexedPairs, threshold: float) -> np.ndarray:
    """``(n,)`` bool: items in some group, i.e. with a pair at or above the threshold."""
    used = pairs.above(threshold)
    return np.bincount(np.concatenate([used.a, used.b]), minlength=n) > 0


def _corpus_spec(args, datasets: list[EmbeddingsDataset]) -> CorpusSpec:
    """How the embed job read the corpus, with this job's overrides."""
    recorded = datasets[0].manifest.get("input", {})
    return CorpusSpec(
        fmt=args.format or recorded.get("fmt"),
        text_field=args.text_field or recorded.get("text_field") or "text",
        id_field=args.id_field if args.id_field is not None else recorded.get("id_field"),
        max_record_bytes=recorded.get("max_record_bytes", CorpusSpec.max_record_bytes),
        max_record_lines=recorded.get("max_record_lines", CorpusSpec.max_record_lines),
    )


def _scan_corpus(args, datasets, index: dict[str, int], grouped: np.ndarray) -> CorpusScan:
    spec = _corpus_spec(args, datasets)
    logger.info("reading the corpus %s", args.corpus)
    return scan_corpus(args.corpus, spec, index, grouped, lambda: embed_error_ids(datasets))


def _order_rank(
    ids: list[str], datasets: list[EmbeddingsDataset], scan: CorpusScan | None
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


def _texts(
    datasets: list[EmbeddingsDataset],
    scan: CorpusScan | None,
    ids: list[str],
    grouped: np.ndarray,
) -> tuple[dict[str, str], str | None]:
    """Texts of the grouped items and where they came from."""
    if scan is not None:
        return scan.texts, scan.pattern
    with_text = [dataset for dataset in datasets if dataset.has_text]
    if not with_text:
        return {}, None
    wanted = {ids[row] for row in np.flatnonzero(grouped).tolist()}
    return texts_from_embeddings(with_text, wanted), ", ".join(d.directory for d in with_text)


def _apply(args, scan: CorpusScan, index: dict[str, int], groups: DuplicateGroups) -> dict:
    """Write the deduplicated corpus; check that its counts agree with the groups."""
    counts = write_deduplicated_corpus(
        scan,
        index,
        groups.kept,
        join(args.output, CORPUS_DIR),
        join(args.output, REJECTED_FILE),
    )
    kept = int(groups.kept.sum())
    if (
        counts.rows != counts.written + counts.removed + counts.not_embedded
        or counts.written != kept
        or counts.removed != groups.removed
        or counts.rows != scan.rows
    ):
        raise JobFailedError(
            f"the deduplicated corpus does not add up: read {counts.rows} rows (scan: "
            f"{scan.rows}), wrote {counts.written} (kept: {kept}), removed {counts.removed} "
            f"(expected {groups.removed}), {counts.not_embedded} not embedded; nothing was "
            "published and the previous output is unchanged"
        )
    return counts.to_json()


def _manifest(
    args,
    pairs_output: PairsOutput,
    datasets: list[EmbeddingsDataset],
    source: PairSource,
    groups: DuplicateGroups,
    summary: DedupSummary,
    histogram: Histogram,
) -> dict:
    """The ``_manifest.json`` of a finished run (without the order and the texts)."""
    first = datasets[0].manifest
    corpus = None
    if args.corpus is not None:
        corpus = {
            "pattern": args.corpus,
            "spec": asdict(_corpus_spec(args, datasets)),
            "applied": args.apply,
        }
        if summary.corpus is not None:
            corpus.update(directory=CORPUS_DIR, rejected_file=REJECTED_FILE, **summary.corpus)
    return {
        "kind": "dedup",
        **{name: first[name] for name in MODEL_FIELDS if name in first},
        "threshold": args.threshold,
        "threshold_compared_as": "float32",
        "keep": args.keep,
        "counts": {
            "rows_in": summary.rows_in,
            "kept": summary.kept,
            "removed": summary.removed,
            "groups": groups.n_groups,
            "grouped": int(groups.sizes.sum()),
            "singletons": summary.rows_in - int(groups.sizes.sum()),
            "largest_group": groups.largest,
        },
        "pairs": {
            "directory": args.pairs,
            "source": source.origin,
            "used": groups.pairs_used,
            "loaded": len(source.pairs),
            "loaded_min_score": source.low,
            "pairs_threshold": pairs_output.threshold,
            "k": pairs_output.k,
            "method": pairs_output.manifest.get("method"),
            "recall_at_k": pairs_output.manifest.get("recall_at_k"),
            "limited_by_k": source.limited(args.threshold),
        },
        "pairs_manifest": pairs_output.manifest,
        "embeddings": [
            {"directory": d.directory, "model_id": d.manifest.get("model_id")} for d in datasets
        ],
        "sweep": [
            {**point.to_json(), "limited_by_k": limited}
            for point, limited in zip(summary.sweep, summary.limited, strict=True)
        ],
        "histogram": histogram.to_json(),
        "files": {
            "groups": GROUPS_FILE,
            "kept_ids": KEPT_FILE,
            "removed_ids": REMOVED_FILE,
            "report": REPORT_FILE,
            "id_list_encoding": ID_LIST_ENCODING,
        },
        "corpus": corpus,
        "notes": summary.notes,
        "software": {"sbert_pipeline": __version__, "apache_beam": beam.__version__},
        "seconds": round(summary.seconds, 3),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main(argv: list[str] | None = None) -> int:
    """CLI entry: run and print the summary (with ``--dry-run``: the sweep)."""
    summary = run(argv)
    if summary.dry_run:
        print("\n".join(summary.sweep_lines()))
    print(summary.line())
    return 0
