import json
import logging
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
from planted_vectors import clustered_vectors, exact_top_k, recall, write_embeddings_dir
from sbert_pipeline.index.files import CorruptIndexError, ids_schema, open_index
from sbert_pipeline.index.planner import BudgetTooSmallError
from sbert_pipeline.io.output_dir import OutputExistsError

from tests.stage_commands import index as run

N, DIM, CLUSTERS, SPREAD = 8000, 32, 60, 1.0
TARGET = 0.95


@pytest.fixture(scope="module")
def corpus() -> np.ndarray:
    return clustered_vectors(N, DIM, clusters=CLUSTERS, spread=SPREAD)


@pytest.fixture(scope="module")
def fresh_queries() -> np.ndarray:
    return clustered_vectors(2000, DIM, clusters=CLUSTERS, spread=SPREAD, draw=1)


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory, corpus):
    directory = tmp_path_factory.mktemp("planted") / "embeddings"
    return write_embeddings_dir(
        directory, corpus, n_shards=3, texts=[f"text {i}" for i in range(N)]
    )


def index_args(embeddings, output, *extra: str) -> list[str]:
    return ["--embeddings", str(embeddings), "--output", str(output), *extra]


@pytest.fixture(scope="module")
def ivf_index(tmp_path_factory, embeddings):
    output = tmp_path_factory.mktemp("ivf") / "index"
    run(index_args(embeddings, output, "--factory", "IVF64,Flat", "--target-recall", str(TARGET)))
    return output


def search_rows(index_dir, queries: np.ndarray, k: int = 10):
    """Corpus rows (from the ``v{row}`` ids) and scores of the index's neighbours."""
    loaded = open_index(str(index_dir))
    scores, positions = loaded.index.search(queries, k)
    ids, _ = loaded.ids.lookup(positions.ravel())
    rows = np.array([int(i[1:]) for i in ids]).reshape(positions.shape)
    return rows, scores


def test_manifest_recall_matches_an_independent_exact_check(ivf_index, corpus, fresh_queries):
    manifest = json.loads((ivf_index / "_manifest.json").read_text())
    assert manifest["factory"] == "IVF64,Flat" and manifest["metric"] == "ip"
    assert manifest["target_reached"] and manifest["recall_at_10"] >= TARGET
    rows, _ = search_rows(ivf_index, fresh_queries)
    independent = recall(rows, exact_top_k(corpus, fresh_queries, 10))
    assert abs(manifest["recall_at_10"] - independent) <= 0.01

    assert manifest["ntotal"] == N and set(manifest["search_params"]) == {"nprobe"}
    assert manifest["size_bytes"] == (ivf_index / "index.faiss").stat().st_size
    assert manifest["embeddings"]["manifest"]["model_id"] == "planted-gaussians"
    assert manifest["queries_per_s"] > 0 and manifest["memory_estimate_bytes"] > 0
    ids = pq.read_table(ivf_index / "ids.parquet")
    assert ids.schema == ids_schema(with_text=True)
    assert ids.column("position").to_pylist() == list(range(N))
    assert sorted(ids.column("id").to_pylist()) == sorted(f"v{i}" for i in range(N))


def test_texts_are_looked_up_with_the_ids(ivf_index, corpus):
    loaded = open_index(str(ivf_index))
    _, positions = loaded.index.search(corpus[[5, 77]], 1)
    assert loaded.ids.lookup(positions[:, 0]) == (["v5", "v77"], ["text 5", "text 77"])


@pytest.mark.parametrize("factory", ["IVF64,Flat", "Flat"])
def test_sharded_beam_build_equals_single_process_build(
    tmp_path, embeddings, fresh_queries, local_pipeline, factory
):
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    run(index_args(embeddings, single, "--factory", factory))
    summary = run(
        index_args(embeddings, sharded, "--factory", factory, "--shards", "4"),
        test_pipeline=local_pipeline,
    )
    one = json.loads((single / "_manifest.json").read_text())
    four = json.loads((sharded / "_manifest.json").read_text())
    assert four["layout"] == "single" and four["shards"]["requested"] == 4
    assert four["search_params"] == one["search_params"] == summary.search_params
    assert four["recall_at_10"] == one["recall_at_10"]
    rows_one, scores_one = search_rows(single, fresh_queries)
    rows_four, scores_four = search_rows(sharded, fresh_queries)
    assert np.array_equal(rows_one, rows_four)
    assert np.allclose(scores_one, scores_four, atol=1e-6)
    assert sorted(p.name for p in sharded.iterdir()) == [
        "_manifest.json",
        "ids.parquet",
        "index.faiss",
    ]


def test_sharded_hnsw_keeps_shards_searched_together(
    tmp_path, embeddings, corpus, fresh_queries, local_pipeline
):
    output = tmp_path / "hnsw"
    run(
        index_args(embeddings, output, "--factory", "HNSW16", "--shards", "4"),
        test_pipeline=local_pipeline,
    )
    manifest = json.loads((output / "_manifest.json").read_text())
    assert manifest["layout"] == "shards"
    assert [f["name"] for f in manifest["files"]["index"]] == [
        *(f"shards/index-{i:05d}-of-00004.faiss" for i in range(4)),
        "shards/held-out.faiss",
    ]
    assert manifest["recall_at_10"] >= TARGET
    rows, _ = search_rows(output, fresh_queries)
    independent = recall(rows, exact_top_k(corpus, fresh_queries, 10))
    assert abs(manifest["recall_at_10"] - independent) <= 0.02


def test_auto_records_its_plan(tmp_path, embeddings):
    output = tmp_path / "auto"
    # The budget holds the whole process (the interpreter and its libraries too), so a size
    # here would depend on the machine; auto is what a run gets by default.
    summary = run(index_args(embeddings, output, "--memory-budget", "auto"))
    manifest = json.loads((output / "_manifest.json").read_text())
    assert summary.factory == manifest["factory"] == manifest["plan"]["chosen"]["factory"]
    assert manifest["factory"] == "Flat" and manifest["recall_at_10"] == 1.0
    assert manifest["plan"]["budget_bytes"] == manifest["memory_budget"]["bytes"] > 0


def test_budget_too_small_is_refused_before_writing(tmp_path, embeddings):
    with pytest.raises(
        BudgetTooSmallError, match=r"the smallest, IVF128,SQ8, needs .* budget of 512"
    ):
        run(index_args(embeddings, tmp_path / "out", "--memory-budget", "512KiB"))
    assert not (tmp_path / "out").exists()


def test_bad_factory_string_is_refused_before_writing(tmp_path, embeddings):
    with pytest.raises(ValueError, match="FAISS cannot build the index 'IVF64,Flatt'"):
        run(index_args(embeddings, tmp_path / "out", "--factory", "IVF64,Flatt"))
    assert not (tmp_path / "out").exists()


def test_truncated_or_corrupt_index_file_is_named(tmp_path, ivf_index):
    copy = tmp_path / "index"
    shutil.copytree(ivf_index, copy)
    index_file = copy / "index.faiss"
    data = index_file.read_bytes()

    index_file.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptIndexError, match=r"index\.faiss is \d+ bytes but the manifest"):
        open_index(str(copy))
    with pytest.raises(CorruptIndexError, match=r"index\.faiss is not a readable FAISS index"):
        _open_ignoring_size(copy)

    shutil.rmtree(copy)
    shutil.copytree(ivf_index, copy)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # inside the stored vectors: FAISS reads it happily
    index_file.write_bytes(bytes(flipped))
    with pytest.raises(CorruptIndexError, match=r"index\.faiss does not match the sha256"):
        open_index(str(copy))


def _open_ignoring_size(directory):
    """Open after making the manifest agree with the truncated file's size."""
    manifest_path = directory / "_manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["index"][0]["size"] = (directory / "index.faiss").stat().st_size
    manifest_path.write_text(json.dumps(manifest))
    return open_index(str(directory), verify_checksums=False)


def test_ids_that_disagree_with_the_index_are_named(tmp_path, ivf_index):
    copy = tmp_path / "index"
    shutil.copytree(ivf_index, copy)
    ids = pq.read_table(copy / "ids.parquet")
    pq.write_table(ids.slice(0, N - 1), copy / "ids.parquet")
    with pytest.raises(
        CorruptIndexError, match=rf"ids\.parquet has {N - 1} ids but .* {N} vectors"
    ):
        open_index(str(copy))
    shuffled = ids.take(np.random.default_rng(0).permutation(N))  # same rows, wrong order
    pq.write_table(shuffled, copy / "ids.parquet")
    with pytest.raises(CorruptIndexError, match=r"ids\.parquet does not match the sha256"):
        open_index(str(copy))
    (copy / "ids.parquet").write_bytes(b"not parquet")
    with pytest.raises(CorruptIndexError, match=r"ids\.parquet is not a readable Parquet file"):
        open_index(str(copy))


def test_a_failed_build_leaves_no_manifest_and_can_be_rerun(tmp_path, embeddings):
    output = tmp_path / "index"
    with pytest.raises(ValueError, match="needs at least 64 training vectors"):
        run(index_args(embeddings, output, "--factory", "IVF64,Flat", "--train-sample", "10"))
    # Refused before the output folder is touched (issue 13): nothing there at all.
    assert not output.exists()
    with pytest.raises(FileNotFoundError, match="did not finish"):
        open_index(str(output))
    run(index_args(embeddings, output, "--factory", "Flat"))  # no --overwrite needed
    assert open_index(str(output)).index.ntotal == N
    with pytest.raises(OutputExistsError, match="--overwrite"):
        run(index_args(embeddings, output, "--factory", "Flat"))


def test_beam_options_without_shards_build_the_index_here_as_sbert_run_does(
    tmp_path, embeddings, caplog
):
    # The same Beam options work for every stage command: without --shards no pipeline runs.
    with caplog.at_level(logging.WARNING, logger="sbert_pipeline.index.stage"):
        run(index_args(embeddings, tmp_path / "out", "--factory", "Flat", "--runner", "dask"))
    assert open_index(str(tmp_path / "out")).index.ntotal == N
    assert "the Beam options apply to the sharded fill" in caplog.text
