"""The one check every stage applies to the vectors it reads: all values finite.

A NaN in one embedding poisons every computation it touches (k-means puts every row in one
cluster, FAISS returns NaN scores, top-k lists come out in arbitrary order) without raising, so
each stage refuses such vectors when it reads them, naming the id. The embed stage turns them
into dead letters instead (:func:`non_finite_rows`), so they never reach ``embeddings/``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real

import numpy as np
import pyarrow as pa


class NonFiniteEmbeddingError(ValueError):
    """An embedding holds NaN or infinite values; the message names its id (or row)."""


def non_finite_rows(vectors: np.ndarray) -> np.ndarray:
    """``(N,)`` bool: the rows of ``(N, d)`` ``vectors`` holding a NaN or infinite value."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2:
        raise ValueError(f"expected an (N, d) array of vectors, got shape {vectors.shape}")
    # max and min propagate NaN, so the common all-finite case costs two reductions and no
    # (N, d) temporary; only a batch that fails them is searched row by row.
    if vectors.size == 0 or (np.isfinite(vectors.max()) and np.isfinite(vectors.min())):
        return np.zeros(len(vectors), dtype=bool)
    return ~np.isfinite(vectors).all(axis=1)


def require_finite(
    vectors: np.ndarray,
    ids: Sequence[str] | pa.Array | None = None,
    *,
    where: str = "",
    first_row: int = 0,
) -> None:
    """Raise :class:`NonFiniteEmbeddingError` unless every value of ``vectors`` is finite.

    Args:
        vectors: ``(N, d)`` vectors.
        ids: their ids (named in the message); without them the row number is named.
        where: the file or dataset they came from, for the message.
        first_row: the row number of ``vectors[0]`` in ``where`` (when ``ids`` is None).
    """
    bad = non_finite_rows(vectors)
    if not bad.any():
        return
    row = int(np.flatnonzero(bad)[0])
    if ids is not None:
        name = ids[row].as_py() if isinstance(ids, pa.Array) else ids[row]
        what = f"the embedding of id {name!r}"
    else:
        what = f"the embedding in row {first_row + row}"
    source = f" in {where}" if where else ""
    raise NonFiniteEmbeddingError(
        f"{what}{source} has NaN or infinite values ({int(bad.sum())} such rows in this batch); "
        "refusing to compute with it (re-embed, or remove those rows)"
    )


def check_cosine(value: object, name: str = "threshold", *, upper_open: bool = False) -> float:
    """Return ``value`` as a float if it is a cosine, else raise ``ValueError`` naming ``name``.

    A cosine is a number in ``[-1, 1]`` (``[-1, 1)`` with ``upper_open``). NaN, infinities,
    bools and non-numbers are refused (a NaN threshold compares false with every score).

    Example:
        >>> check_cosine(0.9)
        0.9
    """
    high = ")" if upper_open else "]"
    number = float(value) if isinstance(value, Real) and not isinstance(value, bool) else math.nan
    inside = -1.0 <= number < 1.0 if upper_open else -1.0 <= number <= 1.0
    if not inside:
        shown = repr(value) if isinstance(value, str) else value
        raise ValueError(f"{name} must lie in [-1, 1{high} (a cosine), got {shown}")
    return number
