"""Parquet vectors without our manifest, given without their columns, are refused naming the
flags that read them (and the columns they have), not as an unfinished run of ours."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.io.external_vectors import open_inputs


def _vectors(path):
    vectors = np.random.default_rng(0).random((4, 3), dtype=np.float32)
    pq.write_table(pa.table({"doc": ["a", "b", "c", "d"], "vec": list(vectors)}), path)
    return path


@pytest.mark.parametrize("as_folder", [False, True])
def test_the_flags_of_own_vectors_are_named(tmp_path, as_folder):
    (tmp_path / "byo").mkdir()
    file = _vectors(tmp_path / "byo" / "vectors.parquet")
    given = str(file.parent if as_folder else file)
    with pytest.raises(FileNotFoundError) as info:
        open_inputs([given], None)
    message = str(info.value)
    assert message.startswith(f"{given} holds Parquet files but no _manifest.json")
    assert "--embedding-field COLUMN --id-field COLUMN" in message
    assert message.endswith("(its columns: doc, vec)")
    assert "rerun" not in message


def test_a_missing_folder_and_an_unfinished_run_keep_their_messages(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"has no _manifest\.json"):
        open_inputs([str(tmp_path / "nowhere")], None)
    unfinished = tmp_path / "embeddings"
    unfinished.mkdir()
    (unfinished / "_STARTED").write_text("{}")
    _vectors(unfinished / "part-00000-of-00001.parquet")
    with pytest.raises(FileNotFoundError, match="did not finish"):
        open_inputs([str(unfinished)], None)
