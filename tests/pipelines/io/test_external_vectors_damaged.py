"""A damaged file of an own-vectors dataset fails in one line that names it and says what to
do (Arrow's own reason, "Parquet magic bytes not found", names no file)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.io.external_vectors import ExternalColumns, ExternalVectorsError, open_external
from sbert_pipeline.jobs.stage_cli import run_command

COLUMNS = ExternalColumns("vec", "doc_id")


def write_part(path, first: int, rows: int = 8) -> None:
    vectors = np.random.default_rng(first).standard_normal((rows, 4)).astype(np.float32)
    ids = [f"doc-{first + i}" for i in range(rows)]
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), 4)
    pq.write_table(pa.table({"doc_id": ids, "vec": column}), path)


def damage(path, how: str) -> None:
    """A file that is not Parquet, or one cut short (its footer gone)."""
    if how == "not parquet":
        path.write_bytes(b"doc_id,vec\ndoc-1,0.5\n")
    else:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("how", ["not parquet", "truncated"])
def test_a_damaged_part_is_named_in_one_line(tmp_path, how):
    data = tmp_path / "vectors"
    data.mkdir()
    write_part(data / "part-0.parquet", 0)
    write_part(data / "part-1.parquet", 8)
    damage(data / "part-1.parquet", how)
    with pytest.raises(ExternalVectorsError) as refused:
        open_external(str(data), COLUMNS)
    message = str(refused.value)
    assert message.startswith(f"{data / 'part-1.parquet'} is not a readable Parquet file (")
    assert "replace it with an intact copy, or remove it from the dataset" in message
    assert "\n" not in message
    # The same line through a stage's command, before its output exists.
    out = tmp_path / "pairs"
    argv = ["--embeddings", str(data), "--embedding-column", "vec", "--id-column", "doc_id"]
    with pytest.raises(ExternalVectorsError, match=r"part-1\.parquet is not a readable Parquet"):
        run_command("pairs", [*argv, "--output", str(out), "--k", "2"])
    assert not out.exists()
