"""The pairs stage's --memory-budget: refused before any vector is read, with the size needed
and what to change; recorded with the peak RSS; a budget below --worker-memory shrinks a local
clustered worker's group of blocks; the launcher holds one copy of the vectors it keeps."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from planted_vectors import clustered_vectors, write_embeddings
from sbert_pipeline import pairs
from sbert_pipeline.io.embeddings import EmbeddingsDataset, all_shards
from sbert_pipeline.io.resources import MemoryBudget, ResourceError
from sbert_pipeline.pairs.memory import check_memory
from sbert_pipeline.pairs.plan import BlockingRequest, block_worker_bytes, plan_blocking
from sbert_pipeline.pairs.vector_reader import VectorReader
from sbert_pipeline.stage_api.options import OptionError

from tests.stage_commands import pairs as run

GiB = 1024**3
N, DIM = 2_000_000, 384
REQUEST = BlockingRequest(10, None, None, None, None, 500, 1000, 0, "4GB")


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory):
    vectors = clustered_vectors(400, 32, clusters=6, seed=2)
    root = tmp_path_factory.mktemp("budget")
    return write_embeddings(root / "e", [f"r{i}" for i in range(400)], vectors, shards=2)


def refuse_reads(monkeypatch):
    def scan(*_args, **_kwargs):
        raise AssertionError("the vectors were read before the budget was checked")

    monkeypatch.setattr(VectorReader, "scan", scan)


@pytest.mark.parametrize(
    ("method", "change"),
    [("clustered", "use a smaller --max-block"), ("exact", "use --method clustered")],
)
def test_a_tiny_budget_is_refused_before_reading(embeddings, tmp_path, monkeypatch, method, change):
    refuse_reads(monkeypatch)
    argv = ["--embeddings", str(embeddings), "--output", str(tmp_path / "p"), "--k", "3"]
    argv += ["--method", method, "--memory-budget", "1MB"]
    with pytest.raises(ResourceError, match="raise --memory-budget to at least") as err:
        run(argv)
    assert change in str(err.value) and "--memory-budget 1MB" in str(err.value)
    assert not (tmp_path / "p").exists()


def test_a_bad_budget_names_the_option():
    with pytest.raises(OptionError, match="--memory-budget"):
        pairs.Options(embeddings=("e",), output="o", memory_budget="lots")


def test_the_manifest_records_the_budget_and_the_peak(embeddings, tmp_path):
    out = tmp_path / "p"
    run(["--embeddings", str(embeddings), "--output", str(out), "--k", "3"])
    section = json.loads((out / "_manifest.json").read_text())["memory_budget"]
    assert section["source"].startswith("auto: ")
    assert 0 < section["needed_bytes"] <= section["bytes"]
    assert section["peak_rss_bytes"] > 0


def clustered_plan(budget: int, here: bool = True):
    """The memory plan of clustered pairs of 2M x 384 under ``budget`` and --worker-memory 4GiB."""
    return check_memory(
        MemoryBudget(budget, "test"),
        "clustered",
        N,
        DIM,
        REQUEST,
        threshold=True,
        worker_memory=4 * GiB,
        here=here,
    )


def test_a_budget_below_the_worker_memory_shrinks_the_groups():
    roomy, tight = clustered_plan(20 * GiB), clustered_plan(3 * GiB)
    assert roomy.worker_bytes == 4 * GiB and tight.worker_bytes < 3 * GiB
    wide = plan_blocking(REQUEST, N, DIM, roomy.worker_bytes)
    narrow = plan_blocking(REQUEST, N, DIM, tight.worker_bytes)
    assert narrow.group_rows < wide.group_rows
    assert narrow.max_block == wide.max_block  # the blocks, hence the results, are the same
    group = block_worker_bytes(narrow.group_rows, DIM) - block_worker_bytes(narrow.max_block, DIM)
    assert tight.needed + group <= 3 * GiB
    # Workers elsewhere: only the launcher counts here.
    assert clustered_plan(3 * GiB, here=False).needed < tight.needed


def test_the_scan_keeps_one_copy_of_the_vectors(tmp_path):
    n, dim = 20_000, 64
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)  # not unit: normalised on read
    ids = [f"x{i:06d}" for i in rng.permutation(n)]
    path = write_embeddings(tmp_path / "e", ids, vectors, shards=3, normalized=False)
    dataset = EmbeddingsDataset.open(str(path))
    reader = VectorReader(tuple(all_shards([dataset])), dim, True, batch_size=2000)
    tracemalloc.start()
    try:
        scan = reader.scan({}, keep=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    kept_ids, kept = scan.loaded
    order = np.argsort(ids)
    assert kept_ids.to_pylist() == [ids[i] for i in order]
    expected = vectors[order] / np.linalg.norm(vectors[order], axis=1, keepdims=True)
    np.testing.assert_allclose(kept, expected, rtol=1e-6, atol=1e-6)
    # The batches kept and then sorted into a second array took twice the vectors.
    assert peak < 1.5 * vectors.nbytes
