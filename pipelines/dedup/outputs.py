"""Writing a dedup run's files: the id lists and ``report.html`` (Beam filesystems)."""

from __future__ import annotations

import numpy as np

from pipelines.dedup.files import KEPT_FILE, REMOVED_FILE, write_id_list
from pipelines.dedup.groups import DuplicateGroups, Histogram
from pipelines.dedup.report import GroupView, group_views, report_html
from pipelines.dedup.report_methods import (
    KnownView,
    known_fact,
    known_section,
    labels_section,
    methods_section,
)
from pipelines.dedup.summary import DedupSummary
from pipelines.io.html import write_text
from pipelines.io.output_dir import join

REPORT_FILE = "report.html"
# Members listed per group in the report; the rest are in groups.parquet.
REPORT_MEMBERS = 20


def write_id_lists(
    output: str, ids: list[str], kept: np.ndarray, rank: np.ndarray
) -> tuple[int, int]:
    """``kept_ids.txt`` and ``removed_ids.txt`` in rank order; returns (kept, removed) written."""
    by_rank = np.argsort(rank, kind="stable").tolist()
    flags = kept.tolist()
    n_kept = write_id_list(join(output, KEPT_FILE), (ids[row] for row in by_rank if flags[row]))
    n_removed = write_id_list(
        join(output, REMOVED_FILE), (ids[row] for row in by_rank if not flags[row])
    )
    return n_kept, n_removed


def largest_groups(
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


def write_report(
    output: str,
    summary: DedupSummary,
    groups: DuplicateGroups,
    facts: dict,
    histogram: Histogram,
    views: list[GroupView],
    labels: dict | None = None,
    known: KnownView | None = None,
) -> None:
    """``report.html``: the counts, the plots, every method's sweep, the calibration against
    the labelled pairs (``labels``: their counts), the known duplicates found (``known``) and
    the largest groups with their texts."""
    counts = {
        "threshold": f"{summary.threshold:g}",
        "method": summary.method,
        "keep": summary.keep,
        **({"radius": f"{summary.radius:g}"} if summary.radius is not None else {}),
        "rows in": summary.rows_in,
        "kept": summary.kept,
        "removed": summary.removed,
        "groups": summary.groups,
        "largest group": summary.largest,
        "pairs used (score >= threshold)": groups.pairs_used,
    }
    point = summary.at_threshold()
    if point is not None:
        counts["labelled pairs: P / R / F1 at the threshold"] = (
            f"{point.precision:.3f} / {point.recall:.3f} / {point.f1:.3f}"
        )
    if known is not None:
        counts["known duplicate pairs in one group"] = known_fact(known)
    if summary.corpus is not None:
        counts["corpus rows written / read"] = (
            f"{summary.corpus['written']} / {summary.corpus['rows_read']}"
        )
        counts["corpus rows not embedded"] = summary.corpus["not_embedded"]
    sections = []
    if known is not None:
        sections.append(known_section(known, summary.sweeps, summary.threshold))
    if summary.sweeps:
        sections.append(methods_section(summary.sweeps, summary.threshold))
        if labels is not None:
            sections.append(
                labels_section(summary.sweeps, labels, summary.target_precision, summary.threshold)
            )
    page = report_html(
        {**facts, **counts},
        histogram,
        summary.threshold,
        summary.sweep,
        views,
        total_groups=groups.n_groups,
        notes=summary.notes,
        sections=sections,
    )
    write_text(join(output, REPORT_FILE), page)
