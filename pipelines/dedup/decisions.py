"""The final decisions of a dedup run: the method's groups with the reference rows added and the
pinned rows kept (Beam-free).

:func:`decide` joins what :mod:`sbert_pipeline.dedup.against` (reference rows, pinned) and
:mod:`sbert_pipeline.dedup.previous` (rows the previous version kept, pinned by ``--stable-keep``)
add to the method's grouping, through :mod:`sbert_pipeline.dedup.pinning`. A previously kept row
that matches a reference row is not pinned: the reference wins, so decontamination holds.
:func:`changes_html` is the report's "Since the last run" section.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from sbert_pipeline.dedup.against import Reference
from sbert_pipeline.dedup.grouping import Grouping
from sbert_pipeline.dedup.groups import IndexedPairs
from sbert_pipeline.dedup.item_ids import ItemIds
from sbert_pipeline.dedup.pinning import extend, merge_groups, pin
from sbert_pipeline.io.texts import texts_from_embeddings

REFERENCE_MARK = " (reference)"  # after a reference id in the report


@dataclass(frozen=True)
class Decisions:
    """The final grouping over the corpus rows ``0 .. n-1`` and the reference rows after them.

    ``rank`` orders them all (reference rows last); ``pinned`` flags the rows kept whatever
    the keep rule (reference rows and the previous kept rows).
    """

    grouping: Grouping
    rank: np.ndarray
    pairs: IndexedPairs
    pinned: np.ndarray
    n: int  # corpus rows

    @property
    def corpus_kept(self) -> np.ndarray:
        """``(n,)`` bool: the corpus rows kept (what ``kept_ids.txt`` lists)."""
        return self.grouping.kept[: self.n]

    def reference_column(self) -> np.ndarray:
        """``(rows,)`` bool: the reference rows."""
        out = np.zeros(self.grouping.n, bool)
        out[self.n :] = True
        return out


def decide(
    grouping: Grouping,
    rank: np.ndarray,
    pairs: IndexedPairs,
    radius: float,
    previous_kept: np.ndarray,
    reference: Reference | None,
) -> Decisions:
    """The method's ``grouping`` of the corpus with the reference rows and the pins applied.

    Args:
        grouping: the chosen method's groups over the ``n`` corpus rows.
        rank: ``(n,)`` the corpus order rank (ties, and which pinned row a chained member
            joins).
        pairs: the loaded corpus pairs.
        radius: the least score by which a member joins a pinned row (the threshold, or the
            star/split radius).
        previous_kept: ``(n,)`` bool, the corpus rows to pin (the previous version kept them).
        reference: the reference corpus and its pairs with the corpus, if any.
    """
    n = grouping.n
    pinned = np.asarray(previous_kept, bool).copy()
    if reference is not None:
        m = reference.m
        pinned &= ~reference.matched  # a kept row that duplicates a reference row goes
        pinned = np.concatenate([pinned, np.ones(m, bool)])
        rank = np.concatenate([np.asarray(rank, np.int64), n + np.arange(m, dtype=np.int64)])
        pairs = IndexedPairs(
            np.concatenate([pairs.a, reference.pairs.a]),
            np.concatenate([pairs.b, reference.pairs.b]),
            np.concatenate([pairs.scores, reference.pairs.scores]),
        )
        grouping = merge_groups(extend(grouping, n + m), reference.pairs, rank)
    final = pin(grouping, pinned, rank, pairs, radius)
    return Decisions(final, np.asarray(rank, np.int64), pairs, pinned, n)


def shown_ids(ids: pa.Array, reference: Reference | None) -> tuple[pa.Array, Sequence[str]]:
    """Every row's id (corpus, then reference) and its id as the report shows it (a
    reference row marked)."""
    if reference is None:
        return ids, ItemIds(ids)
    corpus = ids.to_pylist()
    every = pa.array(corpus + reference.ids, pa.string())
    return every, corpus + [item + REFERENCE_MARK for item in reference.ids]


def reference_texts(reference: Reference, decided: Decisions, shown: list[str]) -> dict:
    """``{shown id: text}`` of the grouped reference rows, from reference embeddings written
    with ``--keep-text`` (none without)."""
    with_text = [dataset for dataset in reference.datasets if dataset.has_text]
    rows = np.flatnonzero(decided.grouping.group[decided.n :] >= 0).tolist()
    if not with_text or not rows:
        return {}
    found = texts_from_embeddings(with_text, {reference.ids[row] for row in rows})
    return {
        shown[decided.n + row]: found[reference.ids[row]]
        for row in rows
        if reference.ids[row] in found
    }


def changes_html(changes: dict | None, stable: dict | None) -> str:
    """The report's "Since the last run" section ("" without a previous version)."""
    if changes is None:
        return ""
    groups, rows = changes["groups"], changes["rows"]
    if stable and stable["pinned"]:
        changed = ", ".join(stable["settings_changed"])
        though = f" (--stable-keep on, though {changed})" if changed else ""
        pinned = (
            f"The {stable['rows_pinned']} rows it kept that still exist were kept again{though}."
        )
    else:
        pinned = f"Its kept rows were not pinned: {stable['reason'] if stable else 'unknown'}."
    cells = [
        ("new groups (no member was in a group)", groups["new"]),
        ("grown groups (a previous group and more)", groups["grown"]),
        ("other changed groups", groups["changed"]),
        ("unchanged groups (same members, same id)", groups["unchanged"]),
        ("rows newly removed", rows["newly_removed"]),
        ("previously kept rows now removed", rows["previously_kept_removed"]),
        ("rows newly kept", rows["newly_kept"]),
        ("new rows", rows["new"]),
        ("rows gone", rows["gone"]),
    ]
    table = "".join(f"<tr><th>{html.escape(k)}</th><td>{v}</td></tr>" for k, v in cells)
    return (
        "<h2>Since the last run</h2>"
        f"<p>Compared with the version of {html.escape(str(changes['previous_created']))}. "
        f"{html.escape(pinned)}</p><table>{table}</table>"
    )


def changes_line(changes: dict | None, stable: str | None = None) -> str:
    """The summary line's part on the previous version ("" without one): ``stable``, whether
    its kept rows were kept again and why, then what changed."""
    if changes is None:
        return ""
    groups, rows = changes["groups"], changes["rows"]
    return (
        ("" if stable is None else f"; {stable}")
        + f"; since the last run: {groups['new']} new groups, {groups['grown']} grown, "
        f"{rows['newly_removed']} rows newly removed ({rows['previously_kept_removed']} of "
        "them kept before)"
    )
