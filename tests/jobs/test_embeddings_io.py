import json
import shutil

import numpy as np
import pytest
from corpus_files import GOOD_TEXTS, write_corpus
from sbert_pipeline.io.embeddings import (
    EmbeddingsDataset,
    IncompatibleEmbeddingsError,
    require_compatible,
)

from tests.stage_commands import embed as run


@pytest.fixture
def embedded(tmp_path, tiny_st_dir, local_pipeline):
    write_corpus(tmp_path / "in", "jsonl", GOOD_TEXTS)
    out = tmp_path / "emb"
    argv = [
        "--input",
        str(tmp_path / "in" / "*"),
        "--output",
        str(out),
        "--model",
        str(tiny_st_dir),
    ]
    run([*argv, "--id-field", "id", "--keep-text"], test_pipeline=local_pipeline)
    return out


def test_open_load_and_stream(embedded, tiny_encoder):
    data = EmbeddingsDataset.open(str(embedded))
    assert data.count == len(GOOD_TEXTS) and data.dim == 32 and data.has_text
    ids, vectors = data.load()
    texts = data.texts()
    assert vectors.dtype == np.float32 and vectors.shape == (len(GOOD_TEXTS), 32)
    expected = tiny_encoder.encode([texts[i] for i in ids])
    assert np.abs(vectors - expected).max() <= 1e-5
    streamed = [len(batch_ids) for batch_ids, _ in data.batches(batch_size=3)]
    assert sum(streamed) == len(GOOD_TEXTS) and max(streamed) <= 3


def test_unfinished_directory_is_refused(embedded):
    (embedded / "_manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="did not finish"):
        EmbeddingsDataset.open(str(embedded))


def test_mixed_models_are_refused(embedded, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(embedded, other)  # the same shards, so only the model fields differ
    manifest = json.loads((embedded / "_manifest.json").read_text())
    (other / "_manifest.json").write_text(json.dumps({**manifest, "weights_sha256": "0" * 64}))
    with pytest.raises(IncompatibleEmbeddingsError, match="weights_sha256"):
        EmbeddingsDataset.open_many([str(embedded), str(other)])
    require_compatible(manifest, dict(manifest), "same")  # identical manifests pass
