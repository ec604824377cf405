"""The exact whole-matrix path of ``sbert pairs`` in the launcher: what it loads, and when.

The launcher reads the vectors on a thread while the search modules (torch, numba) import, so
the modules that read them must not import torch themselves; the read hands Arrow's buffers
over without a copy and puts each row into its sorted place once.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
from planted import unit_rows
from planted_vectors import write_embeddings_dir
from sbert_pipeline.io.embeddings import EmbeddingsDataset, all_shards, parquet_source
from sbert_pipeline.pairs.vector_reader import VectorReader, needs_normalizing

ROOT = Path(__file__).resolve().parents[2]


def _alone(code: str) -> str:
    """Run ``code`` in a fresh interpreter; its stdout (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_launcher_and_its_vector_reader_load_no_torch():
    loaded = _alone(
        "import sys\n"
        "import sbert_pipeline.pairs.stage, sbert_pipeline.pairs.vector_reader\n"
        "import sbert_pipeline.io.embeddings\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'numba'}))"
    )
    assert loaded == "[]"


def test_warm_up_loads_the_scan_kernels():
    # A fresh process has loaded no compiled kernel; one warm-up loads those a search runs.
    found = _alone(
        "from sbert_pipeline.vectors import exact_scores, tile_scan\n"
        "from sbert_pipeline.vectors.block_search import warm_up\n"
        "kernels = (tile_scan.scan_tile, tile_scan.start_lists, exact_scores.rescored_topk)\n"
        "before = [len(k.signatures) for k in kernels]\n"
        "warm_up(16, 5)\n"
        "print(before, [len(k.signatures) > 0 for k in kernels])"
    )
    assert found == "[0, 0, 0] [True, True, True]"


def test_kept_vectors_are_writable_copies_in_id_order(tmp_path):
    rng = np.random.default_rng(3)
    vectors = unit_rows(rng.standard_normal((500, 8))).astype(np.float32)
    ids = [f"id{j:04d}" for j in rng.permutation(len(vectors))]
    write_embeddings_dir(tmp_path / "emb", vectors, n_shards=3, row_group_size=64, ids=ids)
    dataset = EmbeddingsDataset.open(str(tmp_path / "emb"))
    reader = VectorReader(tuple(all_shards([dataset])), 8, needs_normalizing(dataset.manifest))
    assert not reader.normalize  # unit float32 rows are read as stored: Arrow's views
    scan = reader.scan({}, keep=True)
    kept_ids, kept = scan.loaded
    order = np.argsort(ids)
    assert kept_ids.to_pylist() == sorted(ids)
    np.testing.assert_array_equal(kept, vectors[order])
    assert kept.flags.writeable and kept.flags.c_contiguous and kept.flags.owndata
    again_ids, again = reader.load_sorted()
    assert again_ids.equals(kept_ids)
    np.testing.assert_array_equal(again, kept)
    assert again.flags.writeable
    # Streamed batches (what workers search) are writable too.
    assert all(batch.flags.writeable for _, batch in reader.batches())


def test_local_parquet_is_read_by_name(tmp_path):
    with parquet_source(f"file://{tmp_path}/x.parquet") as source:
        assert source == f"{tmp_path}/x.parquet"
    with parquet_source(str(tmp_path / "y.parquet")) as source:
        assert source == str(tmp_path / "y.parquet")
