"""FAISS building blocks of the index stage: index construction, metrics, parameters.

Beam-free. Thin wrappers that give FAISS's C++ errors a readable message and keep the FAISS
specifics (polysemous training, IVF/PQ training minimums, ``ParameterSpace``) in one place.
"""

from __future__ import annotations

import re

import faiss
import numpy as np
from sbert_pipeline.index.planner import train_sample_size
from sbert_pipeline.vectors.exact_truth import Metric

_FAISS_ERROR = re.compile(r"^Error in .*? at \S+:\d+: (?:Error: '.*?' failed: )?")


def faiss_metric(metric: Metric) -> int:
    """FAISS's metric constant for ``ip`` / ``l2``."""
    if metric == "ip":
        return faiss.METRIC_INNER_PRODUCT
    if metric == "l2":
        return faiss.METRIC_L2
    raise ValueError(f"metric must be 'ip' or 'l2', got {metric!r}")


def faiss_message(err: Exception) -> str:
    """A FAISS C++ exception without its ``Error in <signature> at <file>:<line>`` prefix."""
    return _FAISS_ERROR.sub("", str(err).strip().splitlines()[0])


def new_index(factory: str, dim: int, metric: Metric) -> faiss.Index:
    """An empty index from a factory string.

    Raises:
        ValueError: FAISS cannot parse the string or build it for this dimension.
    """
    try:
        index = faiss.index_factory(dim, factory, faiss_metric(metric))
    except RuntimeError as err:
        raise ValueError(
            f"FAISS cannot build the index {factory!r} for {dim}-d vectors: {faiss_message(err)}"
        ) from err
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None and isinstance(faiss.downcast_index(ivf), faiss.IndexIVFPQ):
        # The factory turns on polysemous training for "PQ{m}", which only serves Hamming
        # pre-filtering (never used here) and made PQ training ~3x slower in our runs.
        faiss.downcast_index(ivf).do_polysemous_training = False
    return index


def prepare_vectors(vectors: np.ndarray, metric: Metric) -> np.ndarray:
    """A contiguous float32 copy, L2-normalised for ``ip`` so inner product is cosine."""
    out = np.array(vectors, dtype=np.float32, order="C", copy=True)
    if metric == "ip":
        faiss.normalize_L2(out)
    return out


def set_search_params(index: faiss.Index, params: dict[str, int]) -> None:
    """Apply ``{"nprobe": 12}``-style parameters through ``faiss.ParameterSpace``."""
    space = faiss.ParameterSpace()
    for name, value in params.items():
        space.set_index_parameter(index, name, int(value))


def min_train_points(index: faiss.Index) -> int:
    """Fewest training vectors FAISS accepts: one per IVF list, 2^nbits for PQ codebooks."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        base = faiss.downcast_index(ivf)
    elif isinstance(index, faiss.IndexPreTransform):
        base = faiss.downcast_index(index.index)
    else:
        base = index
    need = int(ivf.nlist) if ivf is not None else 1
    quantizer = getattr(base, "pq", None)
    if quantizer is not None:
        need = max(need, int(quantizer.ksub))
    return need


def default_train_sample(index: faiss.Index, n: int) -> int:
    """Training vectors for an index over N vectors (0 for indexes that need no training).

    64 per IVF list (FAISS wants 39-256; k-means subsamples above 256), at least 64·256 when
    PQ codebooks are trained, at most 500k above the 39-per-list minimum (memory), at most N.
    """
    if index.is_trained:
        return 0
    ivf = faiss.try_extract_index_ivf(index)
    nlist = int(ivf.nlist) if ivf is not None else 1
    return train_sample_size(n, nlist, min_train_points(index))
