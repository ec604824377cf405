"""The order and the texts of the items a dedup run groups (Beam-free).

The *order rank* decides ``first`` and every tie: corpus order (file, then row) when the corpus
is known (``--corpus``, or ids derived as ``file:row``), else id order. The row order of the
embeddings is not used: the embed job shuffles rows between workers. Texts come from the corpus
scan or from embeddings written with ``--keep-text``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from sbert_pipeline.dedup.corpus import CorpusScan
from sbert_pipeline.dedup.groups import IndexedPairs, corpus_ranks, derived_id_ranks, id_ranks
from sbert_pipeline.dedup.item_ids import ItemIds
from sbert_pipeline.io.corpus_reader import CorpusSpec
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.texts import recorded_corpus_spec, texts_from_embeddings


def paired_items(n: int, pairs: IndexedPairs, threshold: float) -> np.ndarray:
    """``(n,)`` bool: items with a pair at or above the threshold (every group member has one)."""
    used = pairs.above(threshold)
    return np.bincount(np.concatenate([used.a, used.b]), minlength=n) > 0


def corpus_spec(
    datasets: list[EmbeddingsDataset],
    fmt: str | None = None,
    text_field: str | None = None,
    id_field: str | None = None,
) -> CorpusSpec:
    """How the embed job read the corpus, with this run's overrides (None: as recorded)."""
    return recorded_corpus_spec(datasets[0].manifest, fmt, text_field, id_field)


def order_rank(
    ids: pa.Array, datasets: list[EmbeddingsDataset], scan: CorpusScan | None
) -> tuple[np.ndarray, str]:
    """The order rank behind ``first`` and every tie, and what it is, in words."""
    if scan is not None:
        return corpus_ranks(scan.positions), "corpus order (file, then row)"
    derived = all(d.manifest.get("input", {}).get("id_field", "") is None for d in datasets)
    if derived:
        rank = derived_id_ranks(ids)
        if rank is not None:
            return rank, "corpus order (file, then row, from the derived file:row ids)"
    return id_ranks(ids), "id order (the corpus order is unknown without --corpus)"


def item_texts(
    datasets: list[EmbeddingsDataset],
    scan: CorpusScan | None,
    ids: Sequence[str],
    wanted: np.ndarray,
) -> tuple[dict[str, str], str | None]:
    """Texts of the ``wanted`` items (``(n,)`` bool) and where they came from (None: nowhere).

    With a corpus scan the texts are those the scan kept (it was asked for the same items).
    """
    if scan is not None:
        return scan.texts, scan.pattern
    with_text = [dataset for dataset in datasets if dataset.has_text]
    if not with_text:
        return {}, None
    found = texts_from_embeddings(with_text, set(ItemIds.of(ids).take(np.flatnonzero(wanted))))
    return found, ", ".join(d.directory for d in with_text)


def text_lengths(texts: dict[str, str], ids: ItemIds, n: int) -> np.ndarray:
    """``(n,)`` int64 characters per item, -1 where the text is unknown."""
    lengths = np.full(n, -1, np.int64)
    if texts:
        rows = ids.rows_of(texts)
        known = rows >= 0  # texts of other rows (none today) are not this run's items
        lengths[rows[known]] = np.array([len(text) for text in texts.values()])[known]
    return lengths
