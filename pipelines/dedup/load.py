"""The pairs a dedup run needs, read from an ``sbert pairs`` output (Beam-free).

``pairs/`` holds every pair down to the pairs stage's threshold (the *floor*); below it, pairs
come from the top-k neighbour lists (``neighbors/``), which miss the pairs of an item with more
than k near neighbours. :func:`load_pairs` reads down to the lowest score any threshold of the
sweep (or a star/split radius) needs, and says which thresholds can be answered exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from sbert_pipeline.dedup.groups import IndexedPairs, index_pairs
from sbert_pipeline.io.pairs_output import PairColumns, PairsOutput


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


def load_pairs(
    pairs_output: PairsOutput,
    ids: pa.Array,
    threshold: float,
    thresholds: list[float],
    reach: float | None = None,
) -> PairSource:
    """Read the pairs the threshold and the sweep need, from ``pairs/`` or, below the pairs'
    threshold, also from ``neighbors/``.

    Args:
        pairs_output: the pairs directory.
        ids: every embedded id (row ``i`` is item ``i``).
        threshold: the chosen threshold (one of ``thresholds``).
        thresholds: the sweep thresholds, ascending.
        reach: the lowest score some method needs besides the thresholds (a star or split
            radius); it must not be below the pairs' floor (the caller checks).

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
        low = answerable[0] if reach is None else min(answerable[0], max(reach, floor))
        pairs = _indexed(ids, pairs_output.read_pairs(low))
        return PairSource(pairs, low, answerable, None, "pairs", notes)

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
    return PairSource(
        _indexed(ids, columns), low, thresholds, limited_below, "pairs+neighbors", notes
    )


def no_pairs(thresholds: list[float]) -> PairSource:
    """The pairs of a run without ``--pairs`` (``--against`` only): none, at every threshold."""
    note = (
        "no --pairs: the corpus is not deduplicated within itself; only the rows that "
        "duplicate a --against reference row are removed"
    )
    return PairSource(IndexedPairs.empty(), thresholds[0], thresholds, None, "none", [note])


def _indexed(ids: pa.Array, columns: PairColumns) -> IndexedPairs:
    return index_pairs(ids, columns.id_a, columns.id_b, columns.scores)


def check_count(pairs_output: PairsOutput, n: int) -> None:
    """Refuse embeddings whose row count differs from the one the pairs were computed over.

    Raises:
        ValueError: the counts differ (the embeddings changed since the pairs stage).
    """
    manifest = pairs_output.manifest
    recorded = manifest.get("n", (manifest.get("counts") or {}).get("items"))
    if recorded is not None and int(recorded) != n:
        raise ValueError(
            f"the embeddings hold {n} rows but the pairs in {pairs_output.directory} were "
            f"computed over {recorded}; the embeddings changed since, rerun sbert pairs"
        )
