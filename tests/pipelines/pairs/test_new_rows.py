"""The search of new rows against all rows (sbert_pipeline.vectors.new_rows.search_rows) against
brute force: top-k lists with ties by position (more exact copies than the candidates a row
keeps), every pair of a new row at or above the threshold once, and the insertions into old
rows' lists."""

from __future__ import annotations

import numpy as np
import pytest
from planted import unit_rows
from planted_vectors import clustered_vectors
from sbert_pipeline.vectors.new_rows import search_rows
from sbert_pipeline.vectors.tile_topk import final_scores

K, DIM, N = 5, 12, 400


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    rng = np.random.default_rng(7)
    data = clustered_vectors(N, DIM, clusters=6, spread=0.5, seed=7)
    # 50 exact copies: more than k + 32 tied candidates, so rows need the full comparison.
    data[rng.choice(N, 50, replace=False)] = unit_rows(rng.standard_normal((1, DIM)))
    return data.astype(np.float32)


def brute(vectors: np.ndarray) -> np.ndarray:
    """Every final score (the one scoring function), own pairs at -inf."""
    n = len(vectors)
    a, b = np.divmod(np.arange(n * n), n)
    scores = final_scores(vectors, a, b).reshape(n, n)
    np.fill_diagonal(scores, -np.inf)
    return scores


def test_search_rows_matches_brute_force(vectors):
    scores = brute(vectors)
    rng = np.random.default_rng(1)
    new = np.zeros(N, bool)
    new[rng.choice(N, 60, replace=False)] = True
    again = np.flatnonzero(~new)[:10]  # old rows searched again: lists only
    queries = np.union1d(np.flatnonzero(new), again)
    floors = np.full(N, np.inf, np.float32)
    updated = np.setdiff1d(np.flatnonzero(~new), again)
    old_columns = np.flatnonzero(~new)
    floors[updated] = [np.sort(scores[row, old_columns])[-K] for row in updated]
    threshold = 0.9
    found = search_rows(vectors, queries, K, new=new, threshold=threshold, floors=floors)

    for position, row in enumerate(queries):
        order = np.lexsort((np.arange(N), -scores[row]))[:K]  # score desc, ties by position
        assert found.indices[position].tolist() == order.tolist()
        assert found.scores[position].tolist() == scores[row, order].tolist()

    above = np.triu(scores >= np.float32(threshold), 1) & (new[:, None] | new[None, :])
    want = {(int(a), int(b)) for a, b in zip(*np.nonzero(above), strict=True)}
    got = list(zip(found.pair_a.tolist(), found.pair_b.tolist(), strict=True))
    assert len(got) == len(set(got)) and set(got) == want
    assert found.pair_scores.tolist() == [scores[a, b] for a, b in got]
    assert got == sorted(got)

    want_inserts = {
        (int(o), int(q)) for o in updated for q in np.flatnonzero(new) if scores[o, q] >= floors[o]
    }
    got_inserts = set(zip(found.insert_row.tolist(), found.insert_neighbor.tolist(), strict=True))
    assert got_inserts == want_inserts and want_inserts
    assert found.insert_score.tolist() == [
        scores[o, q] for o, q in zip(found.insert_row, found.insert_neighbor, strict=True)
    ]


def test_search_rows_refuses_bad_arguments(vectors):
    new = np.zeros(N, bool)
    with pytest.raises(ValueError, match="sorted distinct positions"):
        search_rows(vectors, np.array([3, 2]), K, new=new)
    with pytest.raises(ValueError, match="one bool per row"):
        search_rows(vectors, np.array([1]), K, new=new[:5])
    with pytest.raises(ValueError, match="k must be between 1"):
        search_rows(vectors, np.array([1]), N, new=new)
    with pytest.raises(ValueError, match="floors must hold one score per row"):
        search_rows(vectors, np.array([1]), K, new=new, floors=np.zeros(3, np.float32))
