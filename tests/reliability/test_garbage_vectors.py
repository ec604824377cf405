"""Item 6 of issue 13: NaN/Inf vectors are dead letters at embed time and refused by every reader.

The reproduction: two NaN rows among 2,000 put every row into one k-means cluster with NaN
scores, exit 0. Now each stage that reads embeddings refuses them, naming the id, and the embed
stage never writes them (zero vectors are counted in its manifest).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from garbage_helpers import clustered_vectors, embed_argv, texts, write_embeddings, write_txt
from sbert_pipeline.embed.model_handler import NON_FINITE_REASON
from sbert_pipeline.grouping.pairs import index_pairs
from sbert_pipeline.index.build import ArraySource
from sbert_pipeline.index.sharded import ShardTask, read_row_range
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.jobs.cli import main as cli
from sbert_pipeline.vectors.checks import NonFiniteEmbeddingError, require_finite
from sbert_pipeline.vectors.communities import detect_communities
from sbert_pipeline.vectors.kmeans import fit_spherical_kmeans

from sbert_core import SentenceEncoder
from sbert_core.inference.encode_result import EncodeResult
from tests.stage_commands import cluster, embed, index, pairs


@pytest.fixture(scope="module")
def nan_embeddings(tmp_path_factory):
    """2,000 clustered vectors; rows 17 (NaN) and 1500 (Inf) are garbage."""
    vectors = clustered_vectors(2000, 32, clusters=5)
    vectors[17, 3] = np.nan
    vectors[1500, 0] = np.inf
    return write_embeddings(tmp_path_factory.mktemp("nan") / "emb", vectors)


def test_cluster_refuses_nan_rows_naming_the_id(nan_embeddings, tmp_path, capsys):
    out = tmp_path / "clusters"
    argv = ["cluster", "--embeddings", str(nan_embeddings), "--output", str(out), "--k", "5"]
    assert cli(argv) == 2
    message = capsys.readouterr().err
    assert "the embedding of id 'v17'" in message and "NaN or infinite" in message
    assert "Traceback" not in message
    assert not (out / "_manifest.json").exists()


@pytest.mark.parametrize(
    ("job", "extra"),
    [
        (cluster, ["--method", "communities", "--min-size", "3"]),
        (index, ["--factory", "Flat"]),
        (index, ["--factory", "Flat", "--shards", "2"]),
        (pairs, ["--k", "5"]),
    ],
    ids=["communities", "index", "index-sharded", "pairs"],
)
def test_every_reader_refuses_nan_rows_naming_the_id(nan_embeddings, tmp_path, job, extra):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"embedding of id 'v17'.* NaN or infinite"):
        job(["--embeddings", str(nan_embeddings), "--output", str(out), *extra])
    assert not (out / "_manifest.json").exists()


def test_a_sharded_index_worker_refuses_nan_rows_naming_id_and_file(nan_embeddings):
    shards = EmbeddingsDataset.open(str(nan_embeddings)).shards
    task = ShardTask(1, 2, 1000, 2000, ((shards[1], 1000),))
    with pytest.raises(NonFiniteEmbeddingError, match=r"id 'v1500' in .*part-00001"):
        list(read_row_range(task, batch_size=256))


def test_dedup_refuses_pairs_with_non_finite_scores():
    with pytest.raises(ValueError, match=r"pair \('b', 'c'\) has score nan"):
        index_pairs(["a", "b", "c"], ["a", "b"], ["b", "c"], [0.9, np.nan])


def test_library_entry_points_refuse_non_finite_rows():
    vectors = clustered_vectors(50, 8, clusters=3)
    vectors[7, 2] = np.nan
    with pytest.raises(NonFiniteEmbeddingError, match="row 7"):
        fit_spherical_kmeans(vectors, 3)
    with pytest.raises(NonFiniteEmbeddingError, match="row 7"):
        detect_communities(vectors, min_community_size=2)
    with pytest.raises(NonFiniteEmbeddingError, match="id 'x7'"):
        list(ArraySource(vectors, [f"x{i}" for i in range(50)]).batches(16))


def test_require_finite_names_the_first_bad_id_and_counts_the_batch():
    vectors = np.ones((4, 3), np.float32)
    require_finite(vectors, ["a", "b", "c", "d"])  # finite: nothing raised
    vectors[2, 1] = -np.inf
    vectors[3, 0] = np.nan
    with pytest.raises(NonFiniteEmbeddingError, match=r"id 'c' in f\.parquet .*\(2 such rows"):
        require_finite(vectors, pa.array(["a", "b", "c", "d"]), where="f.parquet")
    with pytest.raises(NonFiniteEmbeddingError, match="row 12"):
        require_finite(vectors, first_row=10)


@pytest.fixture
def garbage_encoder(monkeypatch):
    """The tiny encoder, but texts containing 'poison' embed to NaN/Inf and 'hollow' to zeros."""
    original = SentenceEncoder.encode_detailed

    def encode_detailed(self, texts, **kwargs):
        result = original(self, texts, **kwargs)
        vectors = result.embeddings.copy()
        for row, text in enumerate(texts):
            if "poison" in text:
                vectors[row, row % vectors.shape[1]] = np.nan if row % 2 else np.inf
            if "hollow" in text:
                vectors[row] = 0.0
        return EncodeResult(vectors, result.n_tokens, result.truncated)

    monkeypatch.setattr(SentenceEncoder, "encode_detailed", encode_detailed)


def test_non_finite_embeddings_are_dead_letters_and_zero_vectors_counted(
    garbage_encoder, tiny_st_dir, tmp_path
):
    lines = [*texts(20), "poison one", "the poison two", "hollow inside"]
    corpus = write_txt(tmp_path / "in", lines)
    out = tmp_path / "emb"
    summary = embed(embed_argv(corpus, out, tiny_st_dir, "--keep-text"))
    assert (summary.read, summary.embedded, summary.rejected) == (23, 21, 2)
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["counts"]["zero_vectors"] == 1
    errors = pq.read_table(sorted((out / ERRORS_DIR).glob("*.parquet"))).to_pylist()
    assert sorted(row["excerpt"] for row in errors) == ["poison one", "the poison two"]
    assert {row["reason"] for row in errors} == {NON_FINITE_REASON}
    ids, vectors = EmbeddingsDataset.open(str(out)).load()
    assert len(ids) == 21 and np.isfinite(vectors).all()


def test_a_clean_run_records_zero_zero_vectors(tiny_st_dir, tmp_path):
    corpus = write_txt(tmp_path / "in", texts(6))
    embed(embed_argv(corpus, tmp_path / "emb", tiny_st_dir))
    manifest = json.loads((tmp_path / "emb" / "_manifest.json").read_text())
    assert manifest["counts"]["zero_vectors"] == 0
