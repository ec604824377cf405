"""``sbert index --incremental``: the previous index updated with appended, changed and removed
embeddings parts, compared with a full build of the same embeddings."""

import json

import faiss
import numpy as np
import pyarrow.parquet as pq
import pytest
from planted_vectors import clustered_vectors, exact_top_k, write_embeddings_version
from sbert_pipeline.index.files import open_index
from sbert_pipeline.index.incremental import remove_positions, stored_vectors
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.io.previous_output import NOT_ASKED

from tests.stage_commands import index as run

DIM = 32


def part(name: str, n: int, draw: int, *, clusters: int = 40) -> tuple[list[str], np.ndarray]:
    """``n`` planted vectors with ids ``{name}{row}``."""
    vectors = clustered_vectors(n, DIM, clusters=clusters, spread=1.0, draw=draw)
    return [f"{name}{i}" for i in range(n)], vectors


A, B, D = part("a", 1500, 0), part("b", 1200, 1), part("d", 800, 2)
C = part("c", 1000, 3)
B_CHANGED = (B[0], part("b", 1200, 4)[1])  # the same ids, other vectors


def yesterday_and_today(tmp_path):
    """Yesterday: parts a, b, d. Today: a unchanged, b changed, c new, d removed."""
    embeddings = tmp_path / "embeddings"
    write_embeddings_version(
        embeddings, {"part-a.parquet": A, "part-b.parquet": B, "part-d.parquet": D}
    )

    def today():
        (embeddings / "part-b.parquet").unlink()  # rewritten in place: a new digest
        write_embeddings_version(
            embeddings, {"part-a.parquet": A, "part-b.parquet": B_CHANGED, "part-c.parquet": C}
        )

    return embeddings, today


def current_vectors() -> tuple[list[str], np.ndarray]:
    ids = A[0] + B_CHANGED[0] + C[0]
    return ids, np.concatenate([A[1], B_CHANGED[1], C[1]])


def args(embeddings, output, factory, *extra):
    return ["--embeddings", str(embeddings), "--output", str(output), "--factory", factory, *extra]


def manifest(output) -> dict:
    return json.loads((output / "_manifest.json").read_text())


def search_ids(output, queries: np.ndarray, k: int = 10):
    loaded = open_index(str(output))
    scores, positions = loaded.index.search(queries, k)
    ids, _ = loaded.ids.lookup(positions.ravel())
    return np.array(ids).reshape(positions.shape), scores


def quantizer_centroids(index) -> np.ndarray:
    """The IVF lists' centroids (what training made)."""
    quantizer = faiss.downcast_index(faiss.extract_index_ivf(index).quantizer)
    return quantizer.reconstruct_n(0, quantizer.ntotal).copy()


def test_a_flat_index_updated_equals_a_full_build(tmp_path):
    embeddings, today = yesterday_and_today(tmp_path)
    output, full = tmp_path / "index", tmp_path / "full"
    run(args(embeddings, output, "Flat", "--incremental"))  # no previous index: a full build
    assert manifest(output)["incremental"]["mode"] == "full"
    today()
    run(args(embeddings, output, "Flat", "--incremental"))
    run(args(embeddings, full, "Flat"))

    record = manifest(output)["incremental"]
    assert record["mode"] == "incremental", record
    assert (record["rows_old"], record["rows_new"], record["rows_gone"]) == (1500, 2200, 2000)
    assert manifest(full)["incremental"] == {"mode": "full", "reason": NOT_ASKED}

    ids, vectors = current_vectors()
    queries = clustered_vectors(300, DIM, clusters=40, spread=1.0, draw=9)
    found, scores = search_ids(output, queries)
    expected, expected_scores = search_ids(full, queries)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    assert (found == expected).mean() > 0.999  # ties may swap places
    truth = exact_top_k(vectors, queries, 10)
    assert (found == np.array(ids)[truth]).mean() > 0.999
    assert not any(i.startswith("d") for i in found.ravel())  # removed rows never come back

    table = pq.read_table(output / "ids.parquet")
    assert table.column("position").to_pylist() == list(range(len(ids)))
    assert sorted(table.column("id").to_pylist()) == sorted(ids)
    # Every position holds the vector of the id ids.parquet gives it (changed rows: the new one).
    loaded = open_index(str(output))
    stored = loaded.index.reconstruct_n(0, loaded.index.ntotal)
    by_id = dict(zip(ids, vectors, strict=True))
    want = np.stack([by_id[i] for i in table.column("id").to_pylist()])
    np.testing.assert_allclose(stored, want, atol=1e-6)


def test_an_ivf_index_gets_the_new_rows_without_retraining(tmp_path):
    embeddings, today = yesterday_and_today(tmp_path)
    output = tmp_path / "index"
    run(args(embeddings, output, "IVF16,Flat", "--target-recall", "0.9", "--queries", "300"))
    before = manifest(output)
    centroids = quantizer_centroids(open_index(str(output)).index)
    today()
    run(
        args(
            embeddings,
            output,
            "IVF16,Flat",
            "--target-recall",
            "0.9",
            "--queries",
            "300",
            "--incremental",
        )
    )

    after = manifest(output)
    record = after["incremental"]
    assert record["mode"] == "incremental", record
    assert any("not retrained" in item for item in record["reused"])
    assert after["search_params"] == before["search_params"]
    assert after["recall_queries"] == 200 and after["recall_at_10"] >= 0.9  # CHECK_QUERIES
    assert after["ntotal"] == 3700
    loaded = open_index(str(output))
    ivf = faiss.extract_index_ivf(loaded.index)
    np.testing.assert_array_equal(quantizer_centroids(loaded.index), centroids)

    ids, vectors = current_vectors()
    queries = clustered_vectors(300, DIM, clusters=40, spread=1.0, draw=9)
    found, _ = search_ids(output, queries)
    truth = np.array(ids)[exact_top_k(vectors, queries, 10)]
    hits = sum(len(set(f) & set(t)) for f, t in zip(found, truth, strict=True))
    assert hits / truth.size >= 0.85
    assert not any(i.startswith("d") for i in found.ravel())
    # Positions -> ids: each new row is found at the position ids.parquet names for it.
    own, _ = search_ids(output, C[1][:200], k=1)
    assert (own[:, 0] == np.array(C[0][:200])).mean() > 0.97
    ivf.make_direct_map()
    table = pq.read_table(output / "ids.parquet").column("id").to_pylist()
    by_id = dict(zip(ids, vectors, strict=True))
    positions = [0, 1499, 1500, 2000, 3699]
    stored = np.stack([loaded.index.reconstruct(p) for p in positions])
    np.testing.assert_allclose(stored, np.stack([by_id[table[p]] for p in positions]), atol=1e-6)


def test_a_recall_drop_on_new_rows_retrains(tmp_path):
    embeddings = tmp_path / "embeddings"
    output = tmp_path / "index"
    write_embeddings_version(embeddings, {"part-a.parquet": A, "part-b.parquet": B})
    flags = ("--target-recall", "0.9", "--queries", "300", "--incremental")
    run(args(embeddings, output, "IVF16,Flat", *flags))
    # Today's rows come from another distribution (isotropic), which the lists trained on
    # yesterday's clusters split badly: at yesterday's nprobe their recall falls.
    rng = np.random.default_rng(7)
    spread = rng.standard_normal((3000, DIM)).astype(np.float32)
    spread /= np.linalg.norm(spread, axis=1, keepdims=True)
    write_embeddings_version(
        embeddings,
        {
            "part-a.parquet": A,
            "part-b.parquet": B,
            "part-e.parquet": ([f"e{i}" for i in range(3000)], spread),
        },
    )
    run(args(embeddings, output, "IVF16,Flat", *flags))
    record = manifest(output)["incremental"]
    assert record["mode"] == "full" and "below the target 0.9" in record["reason"]
    assert record["reason"].endswith("more than 2x the previous value; retraining")
    assert manifest(output)["ntotal"] == 5700 and manifest(output)["recall_at_10"] >= 0.9


def test_hnsw_with_removed_rows_is_a_full_build_and_with_appended_rows_an_update(tmp_path):
    embeddings = tmp_path / "embeddings"
    output = tmp_path / "index"
    write_embeddings_version(embeddings, {"part-a.parquet": A, "part-d.parquet": D})
    flags = ("--incremental", "--queries", "200")
    run(args(embeddings, output, "HNSW16", *flags))
    write_embeddings_version(
        embeddings, {"part-a.parquet": A, "part-d.parquet": D, "part-c.parquet": C}
    )
    run(args(embeddings, output, "HNSW16", *flags))
    assert manifest(output)["incremental"]["mode"] == "incremental"
    assert manifest(output)["ntotal"] == 3300
    write_embeddings_version(embeddings, {"part-a.parquet": A, "part-c.parquet": C})
    run(args(embeddings, output, "HNSW16", *flags))
    record = manifest(output)["incremental"]
    assert record["mode"] == "full" and "cannot remove vectors" in record["reason"]
    found, _ = search_ids(output, D[1][:50], k=10)
    assert not any(i.startswith("d") for i in found.ravel())


def test_a_changed_model_or_factory_is_a_full_build(tmp_path):
    embeddings = tmp_path / "embeddings"
    output = tmp_path / "index"
    write_embeddings_version(embeddings, {"part-a.parquet": A})
    run(args(embeddings, output, "Flat", "--incremental"))
    run(args(embeddings, output, "IVF16,Flat", "--incremental"))
    record = manifest(output)["incremental"]
    assert record["mode"] == "full" and "factory_requested changed" in record["reason"]
    write_embeddings_version(embeddings, {"part-a.parquet": A}, weights_sha256="1" * 64)
    run(args(embeddings, output, "IVF16,Flat", "--incremental"))
    record = manifest(output)["incremental"]
    assert record["mode"] == "full" and "the model changed" in record["reason"]
    assert "weights_sha256" in record["reason"]


def test_without_incremental_an_existing_index_is_still_refused(tmp_path):
    embeddings = tmp_path / "embeddings"
    output = tmp_path / "index"
    write_embeddings_version(embeddings, {"part-a.parquet": A})
    run(args(embeddings, output, "Flat"))
    with pytest.raises(OutputExistsError, match="already holds a complete output"):
        run(args(embeddings, output, "Flat"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not ours")
    with pytest.raises(OutputExistsError, match="did not write"):
        run(args(embeddings, tmp_path / "other", "Flat", "--incremental"))


def test_remove_positions_renumbers_an_ivf_index_like_a_flat_one():
    vectors = clustered_vectors(2000, DIM, clusters=20, spread=1.0)
    flat, ivf = (
        faiss.IndexFlatIP(DIM),
        faiss.index_factory(DIM, "IVF8,Flat", faiss.METRIC_INNER_PRODUCT),
    )
    ivf.train(vectors)
    for index in (flat, ivf):
        index.add(vectors)
    gone = np.array([0, 7, 500, 1999])
    for index in (flat, ivf):
        remove_positions(index, gone)
    ivf.nprobe = 8  # every list: exact, so both must answer the same positions
    _, from_flat = flat.search(vectors[:50], 5)
    _, from_ivf = ivf.search(vectors[:50], 5)
    np.testing.assert_array_equal(from_flat, from_ivf)
    kept = np.delete(np.arange(2000), gone)
    rows = np.array([r for r in range(1, 50) if r not in gone])
    assert from_flat.max() < 1996
    np.testing.assert_array_equal(from_flat[rows, 0], np.searchsorted(kept, rows))


def test_stored_vectors_give_back_an_ivf_flat_index_by_position_after_removals():
    vectors = clustered_vectors(3000, DIM, clusters=20, spread=1.0)
    index = faiss.index_factory(DIM, "IVF8,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    remove_positions(index, np.array([3, 100, 2999]))
    out = np.full((2997, DIM), np.nan, np.float32)
    blocks = list(stored_vectors(faiss.downcast_index(index), block_rows=500))
    assert len(blocks) > 1 and sum(len(positions) for positions, _ in blocks) == 2997
    for positions, block in blocks:
        out[positions] = block
    np.testing.assert_array_equal(out, np.delete(vectors, [3, 100, 2999], axis=0))


def test_an_opq_ivf_pq_index_drops_gone_rows_and_finds_new_ones(tmp_path):
    embeddings, today = yesterday_and_today(tmp_path)
    output = tmp_path / "index"
    flags = ("--target-recall", "0.5", "--queries", "200", "--incremental")
    run(args(embeddings, output, "OPQ16,IVF16,PQ16x4", *flags))
    today()
    run(args(embeddings, output, "OPQ16,IVF16,PQ16x4", *flags))
    record = manifest(output)["incremental"]
    assert record["mode"] == "incremental", record
    assert (record["rows_old"], record["rows_new"], record["rows_gone"]) == (1500, 2200, 2000)
    found, _ = search_ids(output, np.concatenate([D[1][:100], C[1][:100], A[1][:100]]))
    assert not any(i.startswith("d") for i in found.ravel())
    # A new or kept row is among its own 10 nearest (PQ codes are approximate).
    own = [i in row for i, row in zip(C[0][:100] + A[0][:100], found[100:], strict=True)]
    assert np.mean(own) > 0.9


def test_only_removed_rows_keep_the_previous_recall_measurement(tmp_path):
    embeddings = tmp_path / "embeddings"
    output = tmp_path / "index"
    write_embeddings_version(embeddings, {"part-a.parquet": A, "part-d.parquet": D})
    flags = ("--target-recall", "0.9", "--queries", "200", "--incremental")
    run(args(embeddings, output, "IVF16,Flat", *flags))
    before = manifest(output)
    write_embeddings_version(embeddings, {"part-a.parquet": A})
    run(args(embeddings, output, "IVF16,Flat", *flags))
    after = manifest(output)
    record = after["incremental"]
    assert (record["mode"], record["rows_old"], record["rows_new"], record["rows_gone"]) == (
        "incremental",
        1500,
        0,
        800,
    )
    assert after["ntotal"] == 1500 and after["recall_at_10"] == before["recall_at_10"]
    assert after["recall_method"].startswith("no new rows")
    ids = pq.read_table(output / "ids.parquet").column("id").to_pylist()
    assert sorted(ids) == sorted(A[0])
    own, _ = search_ids(output, A[1][:200], k=1)
    assert (own[:, 0] == np.array(A[0][:200])).mean() > 0.97
