"""Inverted lists sized before an IVF index is filled, so that the filled index holds what the
planner counted (see docs/architecture.md, "Memory budget, temporary disk and stops").

FAISS keeps each inverted list of an IVF index in a growable vector: adding batch after batch,
each list grows by doubling, and the filled lists hold about 1.5 times the bytes of their
vectors (measured: 1.56x for IVF256,Flat over 600k vectors; 4.75 GiB peak RSS for an
IVF4096,Flat at 2M x 384 that the planner counted at 3.6 GiB). The planner counts the vectors'
bytes, so the fill would break the memory budget. Counting each list's final size first (one
pass of the coarse quantizer over the vectors, which the fill repeats) and reserving it makes
the lists exactly that large.
"""

from __future__ import annotations

from collections.abc import Iterable

import faiss
import numpy as np
from sbert_pipeline.index.faiss_ops import prepare_vectors
from sbert_pipeline.vectors.exact_truth import Metric
from sbert_pipeline.vectors.progress import stage_progress


def _array_lists(index: faiss.Index):
    """The IVF part of ``index`` and its array inverted lists (None, None: not an IVF index
    with lists in memory)."""
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:
        return None, None
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    if not isinstance(lists, faiss.ArrayInvertedLists):
        return None, None
    return ivf, lists


def _transformed(index: faiss.Index, vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as the IVF part of ``index`` sees them (after an OPQ or PCA pre-transform)."""
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        for step in range(index.chain.size()):
            vectors = index.chain.at(step).apply_py(vectors)
    return vectors


def reserve_inverted_lists(
    index: faiss.Index,
    batches: Iterable[np.ndarray],
    metric: Metric,
    total: int | None = None,
) -> int:
    """Reserve, in each inverted list of a trained IVF ``index``, room for the vectors of
    ``batches`` (raw rows, prepared here as the fill prepares them) that it will receive.

    Returns:
        The vectors counted; 0 when ``index`` is not an IVF index with in-memory lists (then
        nothing is read).
    """
    ivf, lists = _array_lists(index)
    if ivf is None:
        return 0
    counts = np.zeros(ivf.nlist, np.int64)
    with stage_progress("index lists", total=total, unit="vectors") as bar:
        for vectors in batches:
            prepared = _transformed(index, prepare_vectors(vectors, metric))
            _, assigned = ivf.quantizer.search(prepared, 1)
            counts += np.bincount(assigned.ravel(), minlength=ivf.nlist)
            bar.update(len(prepared))
    for number in np.flatnonzero(counts).tolist():
        size = lists.list_size(number)
        # std::vector keeps its capacity when it shrinks: growing to the final size and back
        # leaves room for exactly the rows to come.
        lists.resize(number, size + int(counts[number]))
        lists.resize(number, size)
    return int(counts.sum())
