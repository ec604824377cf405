"""``sbert pairs --method clustered --incremental``: new rows join the previous run's blocks
through its stored centroids, their pairs and neighbours are found, removed rows disappear, and
the recall check samples the new rows too; blocks grown past --max-block mean a full run."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from planted import unit_rows
from planted_vectors import clustered_vectors, write_embeddings_version
from sbert_pipeline import pairs
from sbert_pipeline.io.centroids import load_centroids, save_centroids
from sbert_pipeline.io.pairs_output import read_neighbors, read_pairs
from sbert_pipeline.pairs.clustered_incremental import assign_blocks
from sbert_pipeline.vectors.block_plan import nearest_centroids
from sbert_pipeline.vectors.tile_topk import final_scores

K, DIM, THRESHOLD = 5, 16, 0.95


def make_parts() -> dict[str, tuple[list[str], np.ndarray]]:
    """Four parts of 200 rows; part d holds near-copies of 30 rows of part a."""
    rng = np.random.default_rng(4)
    base = clustered_vectors(800, DIM, clusters=8, spread=0.5, seed=4).astype(np.float32)
    parts = {}
    for index, name in enumerate("abcd"):
        vectors = base[index * 200 : (index + 1) * 200].copy()
        parts[name] = ([f"{name}{j:03d}" for j in range(200)], vectors)
    twins = unit_rows(parts["a"][1][:30] + 0.01 * rng.standard_normal((30, DIM)))
    parts["d"][1][:30] = twins
    return parts


@pytest.fixture(scope="module")
def parts():
    return make_parts()


def options(emb, out, **extra) -> pairs.Options:
    values = {"k": K, "threshold": THRESHOLD, "method": "clustered", "clusters": 6, "nprobe": 2}
    values["recall_sample"] = 200
    return pairs.Options(embeddings=(str(emb),), output=str(out), **{**values, **extra})


def publish(emb, parts, names) -> None:
    write_embeddings_version(emb, {f"part-{n}.parquet": parts[n] for n in names})


def test_new_rows_join_the_stored_blocks(parts, tmp_path):
    emb, out = tmp_path / "emb", tmp_path / "pairs"
    publish(emb, parts, "abc")
    first = pairs.run(options(emb, out))
    before = read_pairs_ids(first.output)
    centroids = (out / "centroids.npy").read_bytes()
    publish(emb, parts, "acd")  # b removed, d appended
    result = pairs.run(options(emb, out, incremental=True))

    section = result.manifest["incremental"]
    assert section["mode"] == "incremental"
    assert (section["rows_old"], section["rows_new"], section["rows_gone"]) == (400, 200, 200)
    assert result.manifest["clustered"]["centroids"] == "the previous run's (not refitted)"
    assert (out / "centroids.npy").read_bytes() == centroids
    # Every current row has a list; the removed rows appear nowhere.
    table = read_neighbors(str(out))
    current = set(parts["a"][0]) | set(parts["c"][0]) | set(parts["d"][0])
    assert set(table["id"].to_pylist()) == current and table.num_rows == 600
    named = {i for row in table["neighbor_ids"].to_pylist() for i in row}
    found = read_pairs(str(out))
    assert named <= current
    assert set(found["id_a"].to_pylist()) | set(found["id_b"].to_pylist()) <= current
    # The new twins are paired with their old originals, and head the originals' lists.
    pairs_found = set(zip(found["id_a"].to_pylist(), found["id_b"].to_pylist(), strict=True))
    twins = {(a, d) for a, d in zip(parts["a"][0][:30], parts["d"][0][:30], strict=True)}
    assert twins <= pairs_found
    lists = dict(zip(table["id"].to_pylist(), table["neighbor_ids"].to_pylist(), strict=True))
    assert all(lists[a][0] == d for a, d in twins)
    assert all(lists[d][0] == a for a, d in twins)
    assert section["lists_updated"] >= 30 and section["pairs_added"] >= 30
    # Old pairs among kept rows are kept.
    kept = {p for p in before if not p[0].startswith("b") and not p[1].startswith("b")}
    assert kept <= pairs_found and section["pairs_kept"] == len(kept)
    # The recall check covers the new rows and all rows, against exact search.
    recall = section["recall"]
    assert recall["queries"] == {"new_rows": 100, "all_rows": 100}
    assert recall["new_rows"] > 0.8 and recall["all_rows"] > 0.8
    assert result.manifest["recall_at_k"] == recall["all_rows"]
    assert "incremental:" in result.summary.line()


def read_pairs_ids(output) -> set[tuple[str, str]]:
    table = read_pairs(str(output))
    return set(zip(table["id_a"].to_pylist(), table["id_b"].to_pylist(), strict=True))


def test_changed_blocking_is_a_full_run(parts, tmp_path):
    emb, out = tmp_path / "emb", tmp_path / "pairs"
    publish(emb, parts, "abc")
    pairs.run(options(emb, out))
    publish(emb, parts, "abcd")
    result = pairs.run(options(emb, out, incremental=True, nprobe=3))
    assert result.manifest["incremental"] == {
        "mode": "full",
        "reason": "clustered nprobe_requested changed (2 before, 3 now)",
    }


def test_a_block_grown_past_max_block_is_a_full_run(tmp_path):
    centroids = unit_rows(np.eye(4, DIM))
    save_centroids(str(tmp_path / "centroids.npy"), centroids)
    vectors = np.repeat(centroids, 5, axis=0)  # five rows per block
    ids = pa.array([f"r{i:02d}" for i in range(20)])
    previous = {"clustered": {"nprobe": 1, "max_block": 5}}
    # Rows 0..14 old: block 0 holds five rows, as before.
    assert not isinstance(assign_blocks(str(tmp_path), previous, ids, vectors, ids[:15]), str)
    grown = np.concatenate([vectors, centroids[:1]])
    more = pa.array([*ids.to_pylist(), "r20"])
    reason = assign_blocks(str(tmp_path), previous, more, grown, ids)
    assert reason == "1 block(s) with new rows grew past --max-block 5 (largest 6)"


def test_lists_are_the_blocked_search_with_the_stored_centroids(parts, tmp_path):
    """Every list (old, new, re-searched) is the top-k among the members of its row's blocks
    under the previous centroids, as a clustered run with those centroids gives."""
    emb, out = tmp_path / "emb", tmp_path / "pairs"
    publish(emb, parts, "abc")
    pairs.run(options(emb, out))
    publish(emb, parts, "acd")
    pairs.run(options(emb, out, incremental=True))
    ids = np.array([*parts["a"][0], *parts["c"][0], *parts["d"][0]])
    vectors = np.concatenate([parts[n][1] for n in "acd"])
    order = np.argsort(ids)
    ids, vectors = ids[order], vectors[order]
    probes = nearest_centroids(vectors, load_centroids(str(out / "centroids.npy")), 2)
    table = read_neighbors(str(out))
    lists = dict(zip(table["id"].to_pylist(), table["neighbor_ids"].to_pylist(), strict=True))
    scores = dict(zip(table["id"].to_pylist(), table["scores"].to_pylist(), strict=True))
    for row in range(len(ids)):
        members = np.flatnonzero(np.isin(probes, probes[row]).any(axis=1))
        members = members[members != row]
        final = final_scores(vectors, np.full(len(members), row), members)
        best = np.lexsort((members, -final))[:K]
        assert lists[ids[row]] == ids[members[best]].tolist()
        assert scores[ids[row]] == pytest.approx(np.clip(final[best], -1, 1).tolist(), abs=1e-6)
