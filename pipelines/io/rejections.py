"""Why rows were rejected, in a line a person reads: the most common reasons of an ``_errors/``
folder with their counts, and the fix where one is obvious (no Beam transform).

Reasons that differ only in their details (the row a duplicate id was first seen at, the size
of a row over the limit) count as one: a parenthesised detail is left out of the grouping.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from sbert_pipeline.io.embeddings import parquet_source, shard_paths

TOP_REASONS = 3
# Details that vary from row to row within one reason.
_DETAILS = (re.compile(r"\s*\([^()]*\)"), re.compile(r"(?<=^duplicate id) '.*'$"))
# The start of a reason -> what to do about it, where that is plain.
_FIXES = (
    ("missing field", "--text-field names the field that holds the text"),
    ("non-string text in", "--text-field names the field that holds the text"),
    ("missing id field", "--id-field names a field every record has (or leave it out)"),
    ("null or empty id", "--id-field names a field every record has (or leave it out)"),
    ("record larger than", "raise --max-record-bytes to keep longer rows"),
)


def reason_kind(reason: str) -> str:
    """A reason without the details that vary from row to row."""
    for pattern in _DETAILS:
        reason = pattern.sub("", reason)
    return reason.strip()


def reason_counts(folder: str) -> Counter[str]:
    """How many rows of the ``_errors/`` folder ``folder`` have each reason kind."""
    import pyarrow.parquet as pq

    counts: Counter[str] = Counter()
    for part in shard_paths(folder):
        with parquet_source(part) as source:
            reasons = pq.read_table(source, columns=["reason"]).column("reason").to_pylist()
        counts.update(reason_kind(reason or "") for reason in reasons)
    return counts


def describe_reasons(counts: Counter[str], limit: int = TOP_REASONS) -> str:
    """``most common reasons: R (N), ...; fix: ...`` for the rejections counted, or "" for
    none."""
    if not counts:
        return ""
    top = counts.most_common(limit)
    shown = ", ".join(f"{reason} ({count})" for reason, count in top)
    rest = sum(counts.values()) - sum(count for _, count in top)
    if rest:
        shown += f", {rest} other(s)"
    fixes = list(dict.fromkeys(fix for reason, _ in top for fix in _fixes_of(reason)))
    return f"most common reasons: {shown}" + (f"; fix: {'; '.join(fixes)}" if fixes else "")


def _fixes_of(reason: str) -> Iterable[str]:
    return (fix for start, fix in _FIXES if reason.startswith(start))


def rejection_reasons(folder: str) -> str:
    """:func:`describe_reasons` of an ``_errors/`` folder; "" when it holds no rejection or
    cannot be read (the counts and the folder are still named by the caller)."""
    try:
        return describe_reasons(reason_counts(folder))
    except (OSError, ValueError):
        return ""
