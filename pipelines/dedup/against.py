"""Dedup against a reference corpus (``--against REF_EMBEDDINGS``): the corpus x reference pairs
(Beam-free).

The reference rows are added to the items after the corpus rows (rows ``n .. n + m - 1``) and
pinned (:mod:`sbert_pipeline.dedup.decide`): they are always kept and never listed in
``kept_ids.txt`` or ``removed_ids.txt``, which list the corpus rows. Their pairs with the corpus
(:func:`cross_pairs`) are found by exact search of corpus x reference only (never reference x
reference): the corpus is streamed in batches against the whole reference, one score tile at a
time (:func:`sbert_pipeline.vectors.topk.neighbors_above`, fp32 inner products of the L2-normalised
vectors), so memory holds the reference, one corpus batch, one tile and the pairs found.

A corpus row whose cosine with some reference row is at or above the threshold is removed, and
joins its most similar reference row (the representative of its group, marked ``reference``
in ``groups.parquet``). With ``--pairs`` the corpus is also deduplicated as usual; a corpus
group that holds such a row is removed whole (its members join reference rows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.dedup.sources import embedding_ids
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.io.embeddings import EmbeddingsDataset, require_compatible
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import MANIFEST, join
from sbert_pipeline.vectors.topk import neighbors_above

# Corpus rows per batch of the corpus x reference search.
BATCH_ROWS = 65536


@dataclass(frozen=True)
class Reference:
    """The reference corpus: its embeddings, ids and the pairs it has with the corpus.

    ``pairs`` are over the extended rows: ``a`` a corpus row (``< n``), ``b = n + j`` for
    reference row ``j``.
    """

    datasets: list[EmbeddingsDataset]
    ids: list[str]
    pairs: IndexedPairs
    n: int  # corpus rows

    @property
    def m(self) -> int:
        """Reference rows."""
        return len(self.ids)

    @property
    def matched(self) -> np.ndarray:
        """``(n,)`` bool: corpus rows with a reference row at or above the threshold."""
        out = np.zeros(self.n, bool)
        out[self.pairs.a] = True
        return out

    def to_json(self) -> dict:
        """The manifest's ``against`` section."""
        return {
            "directories": [dataset.directory for dataset in self.datasets],
            "rows": self.m,
            "pairs": len(self.pairs),
            "corpus_rows_matched": int(self.matched.sum()),
            "reference_rows_matched": len(np.unique(self.pairs.b)),
            "search": "exact corpus x reference, fp32 inner products of L2-normalised vectors",
        }


def open_reference(
    directories: Sequence[str],
    corpus: list[EmbeddingsDataset],
    corpus_ids: list[str],
    threshold: float,
) -> Reference:
    """Open the reference embeddings and find their pairs with the corpus at ``threshold``.

    Raises:
        FileNotFoundError: a reference folder is not a finished embed output.
        IncompatibleEmbeddingsError: a reference folder comes from another model identity.
        ValueError: an id is both a corpus and a reference id, or occurs twice.
    """
    datasets = []
    for directory in directories:
        try:
            dataset = EmbeddingsDataset.open(directory)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"--against {directory}: {err}") from err
        require_compatible(
            corpus[0].manifest, dataset.manifest, f"the corpus embeddings and --against {directory}"
        )
        datasets.append(dataset)
    ids = embedding_ids(datasets).to_pylist()
    shared = set(ids).intersection(corpus_ids)
    if shared:
        raise ValueError(
            f"{len(shared)} ids are both corpus and --against reference ids (first: "
            f"{min(shared)!r}); the groups and id lists would be ambiguous: give the two "
            "corpora distinct ids"
        )
    n = len(corpus_ids)
    return Reference(datasets, ids, cross_pairs(corpus, datasets, threshold, n), n)


def reference_identity(directories: Sequence[str]) -> list[dict]:
    """Each ``--against`` folder as a job's fingerprint should see it: its path and the sha256
    of its manifest (which lists every part's digest, so new or changed reference vectors
    change it, and ``sbert run`` reruns dedup).

    Raises:
        FileNotFoundError: a folder has no manifest (not a finished embed output).
    """
    out = []
    for directory in directories:
        path = join(directory, MANIFEST)
        if not FileSystems.exists(path):
            raise FileNotFoundError(
                f"dedup.against: {directory} has no {MANIFEST} (not a finished sbert embed output)"
            )
        with FileSystems.open(path) as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        out.append({"directory": directory, "manifest_sha256": digest})
    return out


def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def cross_pairs(
    corpus: list[EmbeddingsDataset],
    reference: list[EmbeddingsDataset],
    threshold: float,
    n: int,
    batch_rows: int = BATCH_ROWS,
) -> IndexedPairs:
    """Every (corpus row, reference row) with cosine ``>= threshold`` (float32), exactly.

    Rows are numbered as :func:`sbert_pipeline.dedup.inputs.embedding_ids` reads them; reference
    row ``j`` is ``n + j``. Returns the pairs sorted by ``(a, b)``.
    """
    parts = [dataset.load()[1] for dataset in reference]
    dim = corpus[0].dim
    matrix = np.concatenate(parts) if parts else np.zeros((0, dim), np.float32)
    matrix = _normalised(matrix).astype(np.float32)
    found_a, found_b, found_s = [], [], []
    start = 0
    for dataset in corpus:
        for _, vectors in dataset.batches(batch_rows):
            if len(matrix):
                queries = _normalised(vectors).astype(np.float32)
                for row, (columns, scores) in enumerate(
                    neighbors_above(queries, matrix, threshold)
                ):
                    found_a.append(np.full(len(columns), start + row, np.int64))
                    found_b.append(columns.astype(np.int64) + n)
                    found_s.append(scores.astype(np.float32))
            start += len(vectors)
    if start != n:
        raise ValueError(f"the corpus embeddings hold {start} rows, expected {n}")
    if not found_a:
        return IndexedPairs.empty()
    a, b, s = (np.concatenate(part) for part in (found_a, found_b, found_s))
    order = np.lexsort((b, a))
    return IndexedPairs(a[order], b[order], s[order])
