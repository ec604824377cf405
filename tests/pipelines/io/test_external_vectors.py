"""Reading a Parquet dataset of vectors ``sbert embed`` did not make (issue 26, item 4)."""

import gc
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from planted_vectors import write_embeddings
from sbert_pipeline.io.embeddings import IncompatibleEmbeddingsError
from sbert_pipeline.io.external_vectors import (
    ExternalColumns,
    ExternalVectorsError,
    external_files,
    open_external,
    open_inputs,
    recorded_columns,
)

COLUMNS = ExternalColumns("vec", "doc_id", "body")


def table(ids, vectors: np.ndarray, value_type=None, fixed=False) -> pa.Table:
    value_type = value_type or pa.float32()
    ids = pa.array(ids, pa.int64() if ids and isinstance(ids[0], int) else pa.string())
    flat = pa.array(vectors.reshape(-1).astype(value_type.to_pandas_dtype()), value_type)
    dim = vectors.shape[1]
    if fixed:
        column = pa.FixedSizeListArray.from_arrays(flat, dim)
    else:
        offsets = pa.array(np.arange(0, len(vectors) * dim + 1, dim, dtype=np.int32))
        column = pa.ListArray.from_arrays(offsets, flat)
    return pa.table({"doc_id": ids, "vec": column, "body": [f"about {i}" for i in ids.to_pylist()]})


@pytest.fixture
def vectors() -> np.ndarray:
    return np.random.default_rng(4).standard_normal((12, 5))


@pytest.mark.parametrize(
    ("value_type", "fixed"),
    [(pa.float32(), True), (pa.float16(), False), (pa.float32(), False), (pa.float64(), False)],
)
def test_files_are_read_in_name_order_as_float32(tmp_path, vectors, value_type, fixed):
    ids = [f"r{i}" for i in range(12)]
    # written out of name order: the second half first
    pq.write_table(table(ids[6:], vectors[6:], value_type, fixed), tmp_path / "b.parquet")
    pq.write_table(table(ids[:6], vectors[:6], value_type, fixed), tmp_path / "a.parquet")
    (tmp_path / "notes.txt").write_text("not parquet")
    data = open_external(str(tmp_path), COLUMNS)
    got_ids, matrix = data.load()
    expected = vectors.astype(value_type.to_pandas_dtype()).astype(np.float32)
    assert got_ids == ids and matrix.dtype == np.float32
    np.testing.assert_array_equal(matrix, expected)
    assert data.dim == 5 and data.count == 12 and data.directory == str(tmp_path)
    assert data.has_text and data.texts()["r7"] == "about r7"
    assert data.manifest["model_id"] == f"external: {tmp_path}"
    assert data.manifest["model"] == f"external: {tmp_path}"
    assert data.manifest["external"]["dtype"] == [str(value_type)]


def test_one_file_a_glob_and_integer_ids(tmp_path, vectors):
    pq.write_table(table(list(range(6)), vectors[:6]), tmp_path / "x1.parquet")
    pq.write_table(table(list(range(6, 12)), vectors[6:]), tmp_path / "x2.parquet")
    assert external_files(str(tmp_path / "x1.parquet")) == [str(tmp_path / "x1.parquet")]
    assert external_files(str(tmp_path / "x*.parquet")) == [
        str(tmp_path / "x1.parquet"),
        str(tmp_path / "x2.parquet"),
    ]
    single = open_external(str(tmp_path / "x2.parquet"), ExternalColumns("vec", "doc_id"))
    assert single.load()[0] == [str(i) for i in range(6, 12)] and not single.has_text
    both = open_external(str(tmp_path / "x*.parquet"), ExternalColumns("vec", "doc_id", None, "e5"))
    assert both.count == 12 and both.manifest["model_id"] == "external: e5"
    with pytest.raises(FileNotFoundError, match="no Parquet files"):
        external_files(str(tmp_path / "missing"))


def test_the_working_copy_goes_with_the_dataset(tmp_path, vectors):
    pq.write_table(table([f"r{i}" for i in range(12)], vectors), tmp_path / "a.parquet")
    data = open_external(str(tmp_path), COLUMNS)
    folder = Path(data.shards[0]).parent
    assert folder.exists() and not str(folder).startswith(str(tmp_path))
    del data
    gc.collect()
    assert not folder.exists()


def bad(tmp_path, name: str, data: pa.Table) -> str:
    folder = tmp_path / name
    folder.mkdir()
    pq.write_table(data, folder / "part.parquet")
    return str(folder)


def test_every_value_is_checked(tmp_path):
    ids = ["a", "b", "c"]
    rows = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    f16 = pa.list_(pa.float16())

    def check(name, data, message, error=ExternalVectorsError):
        with pytest.raises(error, match=message):
            open_external(bad(tmp_path, name, data), COLUMNS)

    body = {"body": ["x", "y", "z"]}
    nan = [rows[0], [0.0, float("nan")], rows[2]]
    check(
        "nan", pa.table({"doc_id": ids, "vec": pa.array(nan, f16), **body}), "id 'b' in", ValueError
    )
    big = pa.array([rows[0], rows[1], [1e300, 0.0]], pa.list_(pa.float64()))
    check("overflow", pa.table({"doc_id": ids, "vec": big, **body}), "id 'c' in", ValueError)
    ragged = pa.array([rows[0], rows[1], [1.0, 1.0, 1.0]], f16)
    check("ragged", pa.table({"doc_id": ids, "vec": ragged, **body}), "id 'c' has a vector of 3")
    dup = {"doc_id": ["a", "b", "b"], "vec": pa.array(rows, f16), **body}
    check("dup", pa.table(dup), "id 'b' occurs more than once")
    check(
        "null id",
        pa.table({"doc_id": ["a", "b", None], "vec": pa.array(rows, f16), **body}),
        "row 2 has a null id",
    )
    holes = pa.array([rows[0], [1.0, None], rows[2]], f16)
    check("null value", pa.table({"doc_id": ids, "vec": holes, **body}), "id 'b' has a null value")
    check(
        "no text",
        pa.table({"doc_id": ids, "vec": pa.array(rows, f16)}),
        "no column 'body' \\(--text-field\\)",
    )
    check(
        "strings",
        pa.table({"doc_id": ids, "vec": pa.array([["1"], ["2"], ["3"]]), **body}),
        "column 'vec' is list<.*string>",
    )
    check(
        "empty",
        pa.table({"doc_id": ids, "vec": pa.array([[], [], []], f16), **body}),
        "id 'a' has an empty vector",
    )


def test_duplicates_across_files_and_empty_datasets(tmp_path):
    folder = tmp_path / "two"
    folder.mkdir()
    rows = np.ones((2, 3))
    pq.write_table(table(["p", "q"], rows), folder / "1.parquet")
    pq.write_table(table(["r", "p"], rows), folder / "2.parquet")
    with pytest.raises(ExternalVectorsError, match=r"id 'p' occurs more than once .*2\.parquet"):
        open_external(str(folder), COLUMNS)
    empty = tmp_path / "empty"
    empty.mkdir()
    pq.write_table(table([], np.zeros((0, 3))), empty / "1.parquet")
    with pytest.raises(ExternalVectorsError, match="no rows"):
        open_external(str(empty), COLUMNS)


def test_identities_are_not_mixed(tmp_path, vectors):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        ids = [f"{name}{i}" for i in range(12)]
        pq.write_table(table(ids, vectors), tmp_path / name / "x.parquet")
    paths = [str(tmp_path / "a"), str(tmp_path / "b")]
    with pytest.raises(IncompatibleEmbeddingsError, match="weights_sha256: 'external: "):
        open_inputs(paths, COLUMNS)
    named = ExternalColumns("vec", "doc_id", None, "mine")
    assert [d.count for d in open_inputs(paths, named)] == [12, 12]
    ours = write_embeddings(tmp_path / "ours", ["o1"], np.ones((1, 5), np.float32))
    with pytest.raises(IncompatibleEmbeddingsError, match="external: mine"):
        open_inputs([str(ours), paths[0]], named)
    assert open_inputs([str(ours)], named)[0].manifest["model_id"] == "planted"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"id_field": "i"}, "--id-field apply"),
        ({"text_field": "t", "model_name": "m"}, "--text-field, --model-name apply"),
        ({"embedding_field": "e"}, "needs --id-field"),
    ],
)
def test_column_options(given, message):
    args = {"embedding_field": None, "id_field": None, "text_field": None, "model_name": None}
    with pytest.raises(ValueError, match=message):
        ExternalColumns.from_args(SimpleNamespace(**{**args, **given}))
    assert ExternalColumns.from_args(SimpleNamespace(**args)) is None


def test_a_recorded_manifest_reopens_the_same_way(tmp_path, vectors):
    pq.write_table(table([f"r{i}" for i in range(12)], vectors), tmp_path / "a.parquet")
    for columns in (COLUMNS, ExternalColumns("vec", "doc_id", None, "named")):
        data = open_external(str(tmp_path), columns)
        assert recorded_columns(data.manifest) == columns
        again = open_external(str(tmp_path), recorded_columns(data.manifest))
        assert again.manifest == data.manifest
    ours = write_embeddings(tmp_path / "ours", ["o1"], np.ones((1, 5), np.float32))
    assert recorded_columns(open_inputs([str(ours)], None)[0].manifest) is None
