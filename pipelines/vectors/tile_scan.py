"""One-pass scan of an all-pairs score tile into per-row candidate lists (compiled with numba).

:func:`self_topk <sbert_pipeline.vectors.allpairs.self_topk>` multiplies blocks of rows in bfloat16
(or float32) and must find, in every score tile, the few scores that enter a row's list of best
candidates. A tile of the upper triangle serves its rows and, read by columns, the rows of its
columns; the scan reads each score once for both sides, in the order the matrix product wrote
them, and releases the GIL so that the next tile's product runs meanwhile.

Scores are compared as integers: the bit pattern of a non-negative bfloat16/float32, read as a
signed integer of the same width, orders like the float; every negative float is a negative
integer. Each list row keeps an admission key ``K`` with ``key(v) >= K`` whenever ``v`` exceeds
the row's threshold (exactly so for a non-negative threshold; every key passes for a negative
one), and only scores that pass are converted and compared as floats. Chunks of
:data:`_CHUNK` scores are first reduced to a maximum (rows) and an any-hit flag (columns), which
the compiler vectorises; a chunk is read again only when it holds a hit.

List semantics (shared with :class:`sbert_pipeline.vectors.allpairs._CandidateLists`): each row
keeps its ``w`` best candidate scores, descending, and admits a score only when it is strictly above
``c_w`` and at least ``c_k - margin``, where ``c_i`` is the row's ``i``-th best score so far.
"""

from __future__ import annotations

import numba
import numpy as np

# Scores per chunk: one maximum per chunk and row is compared with the row's key. Longer
# chunks amortise the reduction; a chunk with a hit is read again (hits are rare).
_CHUNK = 64
# Chunks of a row when its list starts (start_lists): finer, so that the w-th largest chunk
# maximum lies close to the row's w-th best score and few scores above it are inserted.
_START_CHUNK = 16


@numba.njit(nogil=True, cache=True)
def admission_key(threshold: float, shift: int, lowest: int, scratch: np.ndarray) -> int:
    """The smallest key ``K`` with ``key(v) >= K`` for every non-negative ``v > threshold``.

    ``shift`` is 16 for bfloat16 keys (the upper half of the float32 bits) and 0 for float32;
    ``lowest`` is the smallest key (every score passes, for a negative threshold);
    ``scratch`` is a 1-element int32 array used to read the float's bits.
    """
    if not threshold >= 0.0:  # negative, -inf (an empty list)
        return lowest
    scratch.view(np.float32)[0] = threshold
    bits = scratch[0]
    # Truncating the float32 bits gives the largest key whose value is <= threshold.
    return (bits >> shift) + 1


@numba.njit(nogil=True, cache=True, inline="always")
def _value(key: int, shift: int, scratch: np.ndarray) -> np.float32:
    """The float32 value of a score key (bfloat16 keys are the upper float32 bits)."""
    scratch[0] = np.int32(key) << shift
    return scratch.view(np.float32)[0]


@numba.njit(nogil=True, cache=True, inline="always")
def _place(row: int, value: np.float32, neighbour: int, scores: np.ndarray, ids: np.ndarray):
    """Insert ``(value, neighbour)`` into the descending list of ``row``, after equal scores,
    dropping the last entry."""
    position = scores.shape[1] - 1
    while position > 0 and scores[row, position - 1] < value:
        scores[row, position] = scores[row, position - 1]
        ids[row, position] = ids[row, position - 1]
        position -= 1
    scores[row, position] = value
    ids[row, position] = neighbour


@numba.njit(nogil=True, cache=True)
def _insert(
    row: int,
    value: np.float32,
    neighbour: int,
    scores: np.ndarray,
    ids: np.ndarray,
    thresholds: np.ndarray,
    keys: np.ndarray,
    margins: np.ndarray,
    k: int,
    shift: int,
    lowest: int,
    scratch: np.ndarray,
) -> None:
    """Insert ``(value, neighbour)`` into the sorted list of ``row`` (value above its threshold)
    and update the row's threshold and admission key."""
    _place(row, value, neighbour, scores, ids)
    _update_threshold(row, scores, thresholds, keys, margins, k, shift, lowest, scratch)


@numba.njit(nogil=True, cache=True)
def _update_threshold(
    row: int,
    scores: np.ndarray,
    thresholds: np.ndarray,
    keys: np.ndarray,
    margins: np.ndarray,
    k: int,
    shift: int,
    lowest: int,
    scratch: np.ndarray,
) -> None:
    """Set the threshold and admission key of ``row`` from its list."""
    # Scores equal to c_k - margin must enter: with a zero margin (zero rows) or one below the
    # float spacing, a pair left out at exactly c_k - margin could tie with the k-th best.
    # Admitting "> the float below c_k - margin" admits them.
    proof_line = np.nextafter(scores[row, k - 1] - margins[row], np.float32(-np.inf))
    threshold = max(scores[row, scores.shape[1] - 1], proof_line)
    thresholds[row] = threshold
    keys[row] = admission_key(threshold, shift, lowest, scratch)


@numba.njit(nogil=True, cache=True)
def start_lists(
    tile: np.ndarray,
    height: int,
    width: int,
    row_list: int,
    column_id: int,
    scores: np.ndarray,
    ids: np.ndarray,
    thresholds: np.ndarray,
    keys: np.ndarray,
    margins: np.ndarray,
    k: int,
    shift: int,
) -> None:
    """Fill the empty lists of tile rows ``0 .. height - 1`` (list rows from ``row_list``) with
    each row's ``w`` best scores of the tile, ties by the smaller column.

    Inserting a row's scores one by one while its list fills up costs about ``w log(width / w)``
    insertions; instead, the ``w``-th largest of the row's chunk maxima bounds its ``w``-th best
    score from below, and only the scores at or above it are inserted. Arguments as for
    :func:`scan_tile`.
    """
    lowest = -32768 if shift == 16 else -2147483648
    scratch = np.zeros(1, dtype=np.int32)
    w = scores.shape[1]
    chunks = (width + _START_CHUNK - 1) // _START_CHUNK
    maxima = np.empty(chunks, dtype=np.int64)
    found = np.empty(width, dtype=np.int64)  # keys at or above the floor, by column
    where = np.empty(width, dtype=np.int64)
    work = np.empty(max(width, chunks), dtype=np.int64)
    for i in range(height):
        line = tile[i, :width]
        for c in range(chunks):
            chunk = line[c * _START_CHUNK : (c + 1) * _START_CHUNK]
            top = chunk[0]
            for j in range(chunk.shape[0]):
                top = max(top, chunk[j])
            maxima[c] = top
        # Each of the w chunks with the largest maxima holds a score >= the w-th largest
        # maximum, so the row has at least w scores >= it. Keys order only non-negative scores.
        floor = lowest
        if chunks >= w:
            floor = _largest(maxima, chunks, w, work)
            if floor < 0:
                floor = lowest
        count = 0
        for c in range(chunks):
            if maxima[c] >= floor:
                for j in range(c * _START_CHUNK, min((c + 1) * _START_CHUNK, width)):
                    if line[j] >= floor:
                        found[count] = line[j]
                        where[count] = j
                        count += 1
        if floor >= 0 and count > w:
            floor = _largest(found, count, w, work)  # the row's w-th best score
        row = row_list + i
        for slot in range(w):
            scores[row, slot] = -np.inf
            ids[row, slot] = -1
        for f in range(count):
            if found[f] >= floor:
                value = _value(found[f], shift, scratch)
                # Strictly above the last: of equal scores the smaller column stays.
                if value > scores[row, w - 1]:
                    _place(row, value, column_id + where[f], scores, ids)
        _update_threshold(row, scores, thresholds, keys, margins, k, shift, lowest, scratch)


@numba.njit(nogil=True, cache=True)
def _largest(values: np.ndarray, count: int, rank: int, work: np.ndarray) -> int:
    """The ``rank``-th largest of ``values[:count]`` (quickselect on a copy in ``work``)."""
    for i in range(count):
        work[i] = values[i]
    target = count - rank  # its position in ascending order
    low, high = 0, count - 1
    while low < high:
        pivot = work[(low + high) // 2]
        i, j = low, high
        while i <= j:
            while work[i] < pivot:
                i += 1
            while work[j] > pivot:
                j -= 1
            if i <= j:
                work[i], work[j] = work[j], work[i]
                i += 1
                j -= 1
        if target <= j:
            high = j
        elif target >= i:
            low = i
        else:
            break
    return work[target]


@numba.njit(nogil=True, cache=True)
def scan_tile(
    tile: np.ndarray,
    height: int,
    width: int,
    row_list: int,
    row_id: int,
    column_list: int,
    column_id: int,
    both_sides: bool,
    scores: np.ndarray,
    ids: np.ndarray,
    thresholds: np.ndarray,
    keys: np.ndarray,
    margins: np.ndarray,
    k: int,
    shift: int,
) -> int:
    """Merge the scores of ``tile[:height, :width]`` into the candidate lists.

    Args:
        tile: score keys (int16 view of bfloat16 scores, or int32 view of float32), row-major;
            entries to skip (a row's own score) hold the key of ``-inf``.
        height, width: the valid part of the (padded) tile.
        row_list, row_id: tile row ``i`` feeds list row ``row_list + i`` and is vector
            ``row_id + i``.
        column_list, column_id: likewise for tile columns; columns feed lists only when
            ``both_sides``.
        scores, ids: ``(m, w)`` float32 / int64 lists, each row descending.
        thresholds: ``(m,)`` float32 admission thresholds; ``keys``: ``(m,)`` int32 their keys.
        margins: ``(m,)`` float32, twice each row's bound on candidate minus final score.
        k: neighbours asked for; ``shift``: 16 for bfloat16 keys, 0 for float32.

    Returns:
        The number of scores inserted into lists.
    """
    lowest = -32768 if shift == 16 else -2147483648
    scratch = np.zeros(1, dtype=np.int32)
    inserted = 0
    for i in range(height):
        row = row_list + i
        # 1-d slices: indexing them lets the compiler vectorise the chunk reductions.
        line = tile[i, :width]
        column_keys = keys[column_list : column_list + width]
        for start in range(0, width, _CHUNK):
            chunk = line[start : start + _CHUNK]
            top = chunk[0]  # of the tile's integer type: the reductions vectorise
            column_hit = False
            if both_sides:
                chunk_keys = column_keys[start : start + _CHUNK]
                for j in range(chunk.shape[0]):
                    top = max(top, chunk[j])
                    column_hit |= chunk[j] >= chunk_keys[j]
            else:
                for j in range(chunk.shape[0]):
                    top = max(top, chunk[j])
            # The row and column cases below are written out twice on purpose: the same code
            # through an inlined helper compiled to a scan 2.4x slower (6.7 s vs 2.8 s of scan
            # at 100k rows).
            if top >= keys[row]:
                for j in range(chunk.shape[0]):
                    if chunk[j] >= keys[row]:
                        value = _value(chunk[j], shift, scratch)
                        if value > thresholds[row]:
                            _insert(
                                row,
                                value,
                                column_id + start + j,
                                scores,
                                ids,
                                thresholds,
                                keys,
                                margins,
                                k,
                                shift,
                                lowest,
                                scratch,
                            )
                            inserted += 1
            if column_hit:
                for j in range(chunk.shape[0]):
                    column = column_list + start + j
                    if chunk[j] >= keys[column]:
                        value = _value(chunk[j], shift, scratch)
                        if value > thresholds[column]:
                            _insert(
                                column,
                                value,
                                row_id + i,
                                scores,
                                ids,
                                thresholds,
                                keys,
                                margins,
                                k,
                                shift,
                                lowest,
                                scratch,
                            )
                            inserted += 1
    return inserted
