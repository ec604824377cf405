"""How the pairs stage's :class:`VectorReader` hands the embeddings' vectors over: float32
rows without nulls as views of Arrow's buffers (no copy, whatever the batch's offset), other
columns as copies, and the same rows whether Arrow decodes on its threads or on the caller's."""

import numpy as np
import pyarrow as pa
from planted import unit_rows
from planted_vectors import write_embeddings_dir
from sbert_pipeline.io.embeddings import EmbeddingsDataset, all_shards, embedding_matrix
from sbert_pipeline.pairs.vector_reader import VectorReader, _embedding_view

DIM = 6


def _column(rows: np.ndarray, value_type: pa.DataType | None = None) -> pa.FixedSizeListArray:
    values = pa.array(rows.reshape(-1), value_type or pa.float32())
    return pa.FixedSizeListArray.from_arrays(values, DIM)


def test_float32_rows_are_views_of_the_arrow_buffer_at_any_offset():
    rows = np.arange(10 * DIM, dtype=np.float32).reshape(10, DIM)
    column = _column(rows).slice(3, 5)  # a batch that starts inside the buffer
    view = _embedding_view(column)
    np.testing.assert_array_equal(view, rows[3:8])
    np.testing.assert_array_equal(view, embedding_matrix(column))
    buffer = column.values.buffers()[1]
    assert view.__array_interface__["data"][0] == buffer.address + 3 * DIM * 4
    assert not view.flags.writeable


def test_float16_and_null_rows_are_copied_as_before():
    rows = np.linspace(-1, 1, 4 * DIM, dtype=np.float32).reshape(4, DIM)
    half = _embedding_view(_column(rows.astype(np.float16), pa.float16()))
    assert half.dtype == np.float32 and half.flags.writeable  # a float32 copy
    np.testing.assert_array_equal(half, rows.astype(np.float16).astype(np.float32))
    with_null = pa.FixedSizeListArray.from_arrays(
        pa.array(rows.reshape(-1)), DIM, mask=pa.array([False, True, False, False])
    )
    np.testing.assert_array_equal(_embedding_view(with_null), embedding_matrix(with_null))


def test_the_scan_reads_the_rows_the_threaded_reader_reads(tmp_path):
    rng = np.random.default_rng(4)
    vectors = unit_rows(rng.standard_normal((700, DIM))).astype(np.float32)
    write_embeddings_dir(tmp_path / "emb", vectors, n_shards=3, row_group_size=100)
    dataset = EmbeddingsDataset.open(str(tmp_path / "emb"))
    reader = VectorReader(tuple(all_shards([dataset])), DIM, False, batch_size=128)
    threaded = np.concatenate([v for _, v in reader.batches(threads=True)])
    alone = np.concatenate([v for _, v in reader.batches(threads=False)])
    np.testing.assert_array_equal(threaded, vectors)
    np.testing.assert_array_equal(alone, vectors)
    ids, kept = reader.scan({}, keep=True).loaded
    np.testing.assert_array_equal(kept, vectors[np.argsort([f"v{i}" for i in range(700)])])
    assert ids.to_pylist() == sorted(f"v{i}" for i in range(700))
