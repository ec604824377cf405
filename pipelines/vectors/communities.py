"""sentence-transformers' community detection, computed from top-k neighbour lists (Beam-free).

``sentence_transformers.util.community_detection`` works on the full similarity matrix. It
defines communities as follows, and so do we:

1. Every item with at least ``min_community_size`` items (itself included) at cosine similarity
   ``>= threshold`` is a *centre*; its community is all those items, by similarity descending.
2. Communities are visited largest first (equal sizes: lower centre index first). A community
   whose centre is already taken is skipped; otherwise its members not yet taken form a
   community if there are still at least ``min_community_size`` of them, listed as the centre
   followed by the others. Every item belongs to at most one community.
3. The result is sorted by size, largest first (stable).

Here step 1 reads per-item neighbour lists (:func:`sbert_pipeline.vectors.topk.topk_neighbors` with
the item itself included) instead of an ``N x N`` matrix. A list whose last score still reaches the
threshold may be cut short; :func:`detect_communities` completes those by a threshold search
(sentence-transformers widens them by doubling k), so the result is the same as theirs, up to the
order of members whose scores differ only by fp32 rounding (on 50,000 planted 64-d vectors: the
same 587 communities, with one pair of members 6e-8 apart listed the other way round).

Example:
    >>> communities = detect_communities(vectors, threshold=0.75, min_community_size=10)
    >>> communities[0][0]  # the centre of the largest community
"""

from __future__ import annotations

import numpy as np
from sbert_pipeline.vectors.checks import require_finite
from sbert_pipeline.vectors.topk import neighbors_above, topk_neighbors


class TruncatedNeighborsError(ValueError):
    """Neighbour lists too short to know a centre's whole community."""


def community_members(
    indices: np.ndarray, scores: np.ndarray, threshold: float, min_community_size: int
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """Centres, their members (score order), and the centres whose lists may be cut short.

    Args:
        indices, scores: ``(N, k)`` neighbour lists sorted by score descending, each item's own
            row included (``topk_neighbors(..., exclude_self=False)``).
        threshold: minimum cosine similarity to the centre.
        min_community_size: minimum community size, the centre included.

    Returns:
        ``(centres, members, truncated)``: centres ascending; for each, the neighbours at or above
        the threshold; ``truncated`` holds the centres whose k-th score reaches the threshold
        while k is less than N (more members may exist beyond the list).
    """
    n, k = indices.shape
    if min_community_size < 1:
        raise ValueError(f"min_community_size must be >= 1, got {min_community_size}")
    if k < min(min_community_size, n):
        raise ValueError(
            f"neighbour lists hold {k} items but min_community_size is {min_community_size}"
        )
    # sentence-transformers compares float32 scores with a float32 threshold.
    limit = np.float32(threshold)
    centres = np.flatnonzero(scores[:, min_community_size - 1] >= limit)
    members = [indices[c][scores[c] >= limit] for c in centres]
    truncated = centres[scores[centres, -1] >= limit] if k < n else centres[:0]
    return centres, members, truncated


def greedy_communities(
    centres: np.ndarray, members: list[np.ndarray], n_items: int, min_community_size: int
) -> list[np.ndarray]:
    """Steps 2 and 3 of the module docstring: non-overlapping communities, largest first."""
    sizes = np.fromiter((len(m) for m in members), np.int64, len(members))
    used = np.zeros(n_items, dtype=bool)
    communities: list[np.ndarray] = []
    for position in np.argsort(-sizes, kind="stable"):
        centre, community = int(centres[position]), members[position]
        if used[centre]:
            continue
        free = community[~used[community]]
        if len(free) >= min_community_size:
            chosen = np.concatenate([[centre], free[free != centre]]).astype(np.int64)
            communities.append(chosen)
            used[chosen] = True
    order = np.argsort(-np.fromiter((len(c) for c in communities), np.int64), kind="stable")
    return [communities[i] for i in order]


def communities_from_neighbors(
    indices: np.ndarray, scores: np.ndarray, *, threshold: float, min_community_size: int
) -> list[np.ndarray]:
    """Communities from complete neighbour lists (e.g. the pairs stage's top-k output).

    Raises:
        TruncatedNeighborsError: some centre's list ends at or above the threshold, so its
            community may be larger than its list; recompute with a larger k or use
            :func:`detect_communities`.
    """
    n = len(indices)
    if n < min_community_size:
        return []
    centres, members, truncated = community_members(indices, scores, threshold, min_community_size)
    if len(truncated):
        raise TruncatedNeighborsError(
            f"{len(truncated)} item(s) (first: {int(truncated[0])}) have all {indices.shape[1]} "
            f"neighbours at or above the threshold {threshold}; their communities may be larger. "
            "Recompute the neighbour lists with a larger k"
        )
    return greedy_communities(centres, members, n, min_community_size)


def detect_communities(
    vectors: np.ndarray,
    *,
    threshold: float = 0.75,
    min_community_size: int = 10,
    neighbors: int = 64,
    block_size: int = 1024,
) -> list[np.ndarray]:
    """``community_detection`` on vectors (normalised here), without an ``N x N`` matrix.

    Top-``neighbors`` lists find the centres and most communities; the centres whose list is
    full at the threshold get their whole community from one threshold search
    (:func:`sbert_pipeline.vectors.topk.neighbors_above`) over just those rows.

    Args:
        vectors: ``(N, d)`` float32.
        threshold: minimum cosine similarity to a community's centre.
        min_community_size: smallest community kept, the centre included.
        neighbors: neighbour-list length (at least ``min_community_size``).
        block_size: query rows per block, see :func:`sbert_pipeline.vectors.topk.topk_neighbors`.

    Returns:
        Communities as arrays of row indices, centre first, largest community first.

    Raises:
        NonFiniteEmbeddingError: a row holds NaN or infinite values (its scores would be NaN).
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    require_finite(vectors)
    n = len(vectors)
    if min_community_size < 1:
        raise ValueError(f"min_community_size must be >= 1, got {min_community_size}")
    if n < min_community_size:
        return []
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.maximum(norms, np.float32(1e-12))
    k = min(n, max(neighbors, min_community_size))
    indices, scores = topk_neighbors(unit, unit, k, block_size=block_size, exclude_self=False)
    centres, members, truncated = community_members(indices, scores, threshold, min_community_size)
    if len(truncated):
        complete = neighbors_above(unit[truncated], unit, threshold, block_size=block_size)
        position = {int(c): i for i, c in enumerate(centres)}
        for centre, (ids, _) in zip(truncated, complete, strict=True):
            members[position[int(centre)]] = ids
    return greedy_communities(centres, members, n, min_community_size)
