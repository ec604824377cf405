"""Final (exact) scores of vector pairs, and each row's top-k from its rescored candidates.

A final score is the float32 rounding of the float64 sum of the ``d`` float32 products of two
rows. Products of float32 numbers are exact in float64 and the float64 sum is within
``d u64`` of exact, so the score is the correctly rounded inner product but for ties with a
rounding boundary; and it is computed by one function, in one order, whoever asks: so
``score(x, y) == score(y, x)``, exact duplicates tie exactly, and a pair's score does not
depend on how it was found (top-k lists, cluster blocks, threshold search).

Compiled with numba: a pair costs ``d`` fused multiply-adds, with no temporaries, so rescoring
a million candidate pairs takes a fraction of a second.
"""

from __future__ import annotations

import numba
import numpy as np

# Pairs of one row scored together, at most (their float64 sums stay in registers and L1).
_RUN = 64


@numba.njit(nogil=True, cache=True)
def _scores_of_row(
    data: np.ndarray, a: int, others: np.ndarray, count: int, sums: np.ndarray
) -> None:
    """``sums[c]`` = float64 sum of the products of rows ``a`` and ``others[c]``, ``c < count``.

    Every sum runs over the dimensions in order (one fixed order for every pair, on every
    machine: no reassociation), and the ``count`` sums advance together: independent chains of
    additions, and one pass over the other rows side by side, which the memory system fetches
    as parallel streams instead of one row after another.
    """
    for c in range(count):
        sums[c] = 0.0
    left = data[a]
    for i in range(left.shape[0]):
        x = np.float64(left[i])
        for c in range(count):
            sums[c] += x * np.float64(data[others[c], i])


@numba.njit(nogil=True, cache=True)
def pair_scores_into(data: np.ndarray, a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = final score of rows ``a[i]`` and ``b[i]`` of ``data`` (``(n, d)`` float32).

    Runs of pairs with the same ``a`` are scored together (fastest when ``a`` is sorted).
    """
    sums = np.empty(_RUN, dtype=np.float64)
    first = 0
    while first < a.shape[0]:
        last = first + 1
        while last < a.shape[0] and last - first < _RUN and a[last] == a[first]:
            last += 1
        _scores_of_row(data, a[first], b[first:last], last - first, sums)
        for i in range(last - first):
            out[first + i] = np.float32(sums[i])
        first = last


@numba.njit(nogil=True, cache=True)
def rescored_topk(
    data: np.ndarray,
    scores: np.ndarray,
    ids: np.ndarray,
    margins: np.ndarray,
    proven: np.ndarray,
    first_row: int,
    k: int,
    out_ids: np.ndarray,
    out_scores: np.ndarray,
) -> int:
    """Each proven row's top ``k`` by final score (descending, then index ascending).

    Args:
        data: ``(n, d)`` float32 vectors.
        scores, ids: ``(m, w)`` candidate lists (candidate-pass scores, descending) of the
            rows ``first_row .. first_row + m - 1``.
        margins: ``(m,)`` twice each row's bound on candidate minus final score: only the
            candidates within it of the row's k-th candidate score can be in its top k.
        proven: ``(m,)`` bool, the rows to answer (others are left as they are).
        k: neighbours per row.
        out_ids, out_scores: ``(m, k)`` results.

    Returns:
        The number of pairs scored.
    """
    width = scores.shape[1]
    found = np.empty(width, dtype=np.float32)
    which = np.empty(width, dtype=np.int64)
    sums = np.empty(width, dtype=np.float64)
    rescored = 0
    for row in range(scores.shape[0]):
        if not proven[row]:
            continue
        line = scores[row, k - 1] - margins[row]
        count = 0
        for slot in range(width):
            if scores[row, slot] >= line:
                which[count] = ids[row, slot]
                count += 1
        _scores_of_row(data, first_row + row, which, count, sums)
        for i in range(count):
            found[i] = np.float32(sums[i])
        rescored += count
        # Insertion sort by score descending, then index ascending (count is about k).
        for i in range(1, count):
            score, index = found[i], which[i]
            j = i
            while j > 0 and (
                found[j - 1] < score or (found[j - 1] == score and which[j - 1] > index)
            ):
                found[j], which[j] = found[j - 1], which[j - 1]
                j -= 1
            found[j], which[j] = score, index
        for place in range(k):
            out_ids[row, place] = which[place]
            out_scores[row, place] = found[place]
    return rescored
