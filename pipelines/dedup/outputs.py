"""The files a dedup run writes: ``groups.parquet`` (:data:`GROUPS_SCHEMA`), the id lists
``kept_ids.txt`` / ``removed_ids.txt`` and ``report.html``.

The id lists are UTF-8, one id per line, LF-terminated. Ids may contain anything, so three
characters are escaped: a backslash is written as ``\\\\``, a line feed as ``\\n`` and a carriage
return as ``\\r``; an id without them (the usual case) is written as it is. Read the lists back
with :func:`read_id_list` (split on LF only, then unescape).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sbert_pipeline.dedup.dedup_summary import DedupSummary
from sbert_pipeline.dedup.grouping import Grouping
from sbert_pipeline.dedup.groups import Histogram
from sbert_pipeline.dedup.item_ids import ItemIds
from sbert_pipeline.dedup.report import GroupView, group_views, report_html
from sbert_pipeline.dedup.report_methods import (
    KnownView,
    known_fact,
    known_section,
    labels_section,
    methods_section,
)
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.html import write_text
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.vectors.cosine_range import clamp_cosines

GROUPS_FILE, KEPT_FILE, REMOVED_FILE = "groups.parquet", "kept_ids.txt", "removed_ids.txt"
ID_LIST_ENCODING = (
    "UTF-8, one id per line, LF-terminated; backslash, LF and CR inside an id are written as "
    "\\\\, \\n and \\r"
)

GROUPS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("group", pa.int64(), nullable=False),
        pa.field("is_representative", pa.bool_(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        # Score of the pair (member, representative); null for the representative itself and
        # for chained members (their pair with it is under the threshold; dedup/terms.py).
        pa.field("score", pa.float32()),
    ]
)

REPORT_FILE = "report.html"
# Members listed per group in the report; the rest are in groups.parquet.
REPORT_MEMBERS = 20


def write_id_lists(
    output: str, ids: Sequence[str], kept: np.ndarray, rank: np.ndarray
) -> tuple[int, int]:
    """``kept_ids.txt`` and ``removed_ids.txt`` in rank order; returns (kept, removed) written."""
    by_rank, listed = np.argsort(rank, kind="stable"), ItemIds.of(ids)
    flags = kept[by_rank]
    n_kept = write_id_list(join(output, KEPT_FILE), listed.iter_rows(by_rank[flags]))
    n_removed = write_id_list(join(output, REMOVED_FILE), listed.iter_rows(by_rank[~flags]))
    return n_kept, n_removed


def largest_groups(
    groups: Grouping,
    limit: int,
    ids: Sequence[str],
    rank: np.ndarray,
    scores: np.ndarray,
    texts: dict[str, str],
    group_ids: np.ndarray | None = None,
) -> list[GroupView]:
    """The ``limit`` largest groups as the report shows them (at most REPORT_MEMBERS each),
    numbered by ``group_ids`` (``(G,)`` the published ids; default ``0 .. G-1``)."""
    shown = min(limit, groups.n_groups)
    numbers = range(shown) if group_ids is None else group_ids[:shown].tolist()
    return group_views(
        ids,
        [groups.members(g, rank)[:REPORT_MEMBERS] for g in range(shown)],
        groups.kept,
        scores,
        texts,
        list(numbers),
        groups.sizes[:shown].tolist(),
    )


def write_report(
    output: str,
    summary: DedupSummary,
    groups: Grouping,
    facts: dict,
    histogram: Histogram,
    views: list[GroupView],
    labels: dict | None = None,
    known: KnownView | None = None,
    first_sections: Sequence[str] = (),
) -> None:
    """``report.html``: the counts, the plots, every method's sweep, the calibration against
    the labelled pairs (``labels``: their counts), the known duplicates found (``known``) and
    the largest groups with their texts; ``first_sections`` (HTML) come before the others."""
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
    sections = [section for section in first_sections if section]
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


def groups_table(
    ids: pa.Array,
    groups: Grouping,
    rank: np.ndarray,
    scores: np.ndarray,
    group_ids: np.ndarray | None = None,
) -> pa.Table:
    """``groups.parquet``: one row per grouped item, by group, representative first, then rank.

    Args:
        ids: every item's id.
        groups: the groups.
        rank: the order rank.
        scores: ``(n,)`` each member's score with its representative (NaN: unknown / itself).
        group_ids: ``(G,)`` the id written for each group (default: its number ``0 .. G-1``;
            stable ids: pipelines/dedup/previous.py).
    """
    rows = np.flatnonzero(groups.group >= 0)
    rows = rows[np.lexsort((rank[rows], ~groups.representative[rows], groups.group[rows]))]
    member_scores = clamp_cosines(scores[rows])
    return pa.Table.from_arrays(
        [
            ids.take(pa.array(rows, pa.int64())),
            pa.array(
                groups.group[rows] if group_ids is None else group_ids[groups.group[rows]],
                pa.int64(),
            ),
            pa.array(groups.representative[rows], pa.bool_()),
            pa.array(groups.sizes[groups.group[rows]], pa.int64()),
            pa.array(member_scores, pa.float32(), mask=np.isnan(member_scores)),
        ],
        schema=GROUPS_SCHEMA,
    )


def reference_column(table: pa.Table, ids: pa.Array, reference: np.ndarray) -> pa.Table:
    """``groups.parquet`` with a ``reference`` column: whether each member is a row of the
    ``--against`` reference (always kept, never in the id lists). Written with ``--against``
    only, so other runs keep their schema."""
    rows = pc.index_in(table["id"], value_set=ids).to_numpy()
    return table.append_column(
        pa.field("reference", pa.bool_(), nullable=False), pa.array(reference[rows], pa.bool_())
    )


def encode_id(value: str) -> str:
    """An id as one line of an id list (without the line feed)."""
    if "\\" not in value and "\n" not in value and "\r" not in value:
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


_ESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)


def decode_id(line: str) -> str:
    """The id written as ``line`` by :func:`encode_id`.

    Raises:
        ValueError: an escape other than ``\\\\``, ``\\n`` or ``\\r``.
    """

    def replace(match: re.Match) -> str:
        if match.group(1) not in _ESCAPES:
            raise ValueError(f"bad escape {match.group(0)!r} in id list line {line!r}")
        return _ESCAPES[match.group(1)]

    return _ESCAPE.sub(replace, line) if "\\" in line else line


def write_id_list(path: str, ids: Iterable[str]) -> int:
    """Write ids one per line (see the module docstring); returns how many."""
    count = 0
    chunk: list[str] = []
    with FileSystems.create(path, mime_type="text/plain") as handle:
        for value in ids:
            chunk.append(encode_id(value))
            count += 1
            if len(chunk) >= 65536:
                handle.write(("\n".join(chunk) + "\n").encode("utf-8"))
                chunk = []
        if chunk:
            handle.write(("\n".join(chunk) + "\n").encode("utf-8"))
    return count


def read_id_list(path: str) -> list[str]:
    """Ids from a list written by :func:`write_id_list`."""
    return read_id_array(path).to_pylist()


def read_id_array(path: str) -> pa.Array:
    """Ids from a list written by :func:`write_id_list`, as a ``string`` array: split in
    Arrow, so that millions of ids never become Python strings; only escaped lines are."""
    with FileSystems.open(path) as handle:
        data = handle.read()
    if not data:
        return pa.array([], pa.string())
    text = pa.array([data.decode("utf-8")], pa.large_string())
    lines = pc.split_pattern(text, "\n").flatten()
    lines = lines.slice(0, len(lines) - 1).cast(pa.string())  # the last line feed ends the list
    escaped = np.flatnonzero(pc.match_substring(lines, "\\").to_numpy(zero_copy_only=False))
    if len(escaped) == 0:
        return lines
    decoded = [decode_id(line) for line in lines.take(pa.array(escaped)).to_pylist()]
    values = lines.to_pylist()  # rare: ids with a backslash or a line break
    for row, value in zip(escaped.tolist(), decoded, strict=True):
        values[row] = value
    return pa.array(values, pa.string())
