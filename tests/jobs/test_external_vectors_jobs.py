"""pairs, index and cluster on a Parquet dataset ``sbert embed`` did not make (issue 26, item 4).

The vectors are planted (a background and near-duplicate twins) in columns of our choosing
(``vec``, ``doc_id``, ``body``) and the outputs are compared with brute-force numpy cosine.
"""

import json

import apache_beam.testing.test_pipeline as beam_testing
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from planted_vectors import write_embeddings
from sbert_pipeline.index.files import open_index
from sbert_pipeline.io.embeddings import IncompatibleEmbeddingsError
from sbert_pipeline.io.pairs_output import read_pairs
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from tests.stage_commands import cluster, dedup, index, pairs

N, DIM, TWINS, THRESHOLD = 300, 16, 30, 0.9
COLUMNS = ["--embedding-column", "vec", "--id-column", "doc_id"]


def local():
    return beam_testing.TestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True)


def planted_vectors() -> tuple[list[str], np.ndarray]:
    """300 rows of dim 16: a random background and 30 near-duplicate twins; ids not in row order."""
    rng = np.random.default_rng(26)
    background = rng.standard_normal((N - TWINS, DIM))
    bases = rng.choice(N - TWINS, TWINS, replace=False)
    twins = background[bases] + 0.05 * rng.standard_normal((TWINS, DIM))
    vectors = np.concatenate([background, twins])
    ids = [f"doc-{j:04d}" for j in rng.permutation(N)]
    return ids, vectors


def vector_column(vectors: np.ndarray, kind: str) -> pa.Array:
    """The ``vec`` column as a fixed-size list of float32 or a list of float16 / float64."""
    value_type = {"fixed32": pa.float32(), "list16": pa.float16(), "list64": pa.float64()}[kind]
    flat = pa.array(vectors.reshape(-1).astype(value_type.to_pandas_dtype()), value_type)
    if kind == "fixed32":
        return pa.FixedSizeListArray.from_arrays(flat, DIM)
    offsets = pa.array(np.arange(0, len(vectors) * DIM + 1, DIM, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, flat)


def write_dataset(folder, ids, vectors, kind: str, files: int = 3):
    """A folder of ``files`` Parquet files (named so that name order is row order)."""
    folder.mkdir(parents=True)
    bounds = np.linspace(0, len(ids), files + 1).astype(int)
    for f in range(files):
        lo, hi = bounds[f], bounds[f + 1]
        table = pa.table(
            {
                "doc_id": pa.array(ids[lo:hi], pa.string()),
                "vec": vector_column(vectors[lo:hi], kind),
                "body": [f"text of {i}" for i in ids[lo:hi]],
            }
        )
        pq.write_table(table, folder / f"chunk-{f}.parquet")
    return folder


def stored(vectors: np.ndarray, kind: str) -> np.ndarray:
    """The vectors as the dataset holds them, as float32."""
    dtype = {"fixed32": np.float32, "list16": np.float16, "list64": np.float64}[kind]
    return vectors.astype(dtype).astype(np.float32)


def brute_force_pairs(ids, vectors: np.ndarray, threshold: float) -> set[tuple[str, str]]:
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    scores = unit @ unit.T
    a, b = np.nonzero(np.triu(scores >= threshold, 1))
    return {(min(ids[x], ids[y]), max(ids[x], ids[y])) for x, y in zip(a, b, strict=True)}


def margin(vectors: np.ndarray, threshold: float) -> float:
    """The distance of the pair score nearest the threshold (a float32 search agrees when big)."""
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    scores = unit @ unit.T
    return float(np.min(np.abs(scores[np.triu_indices(len(unit), 1)] - threshold)))


@pytest.fixture(scope="module")
def planted():
    return planted_vectors()


@pytest.mark.parametrize("kind", ["fixed32", "list16", "list64"])
def test_pairs_equal_brute_force(tmp_path, planted, kind):
    ids, vectors = planted
    data = write_dataset(tmp_path / "vectors", ids, vectors, kind)
    held = stored(vectors, kind)
    assert margin(held, THRESHOLD) > 1e-4  # no pair so near the threshold that rounding decides
    out = tmp_path / "pairs"
    argv = ["--embeddings", str(data), *COLUMNS, "--output", str(out)]
    argv += ["--threshold", str(THRESHOLD), "--method", "exact", "--k", "5"]
    pairs(argv, test_pipeline=local())
    table = read_pairs(str(out))
    found = set(
        zip(table.column("id_a").to_pylist(), table.column("id_b").to_pylist(), strict=True)
    )
    expected = brute_force_pairs(ids, held, THRESHOLD)
    assert len(expected) >= TWINS and found == expected
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["model_id"] == f"external: {data}"


def test_dedup_groups_the_pairs_of_external_vectors(tmp_path, planted):
    ids, vectors = planted
    data = write_dataset(tmp_path / "vectors", ids, vectors, "fixed32")
    out = tmp_path / "pairs"
    argv = ["--embeddings", str(data), *COLUMNS, "--output", str(out), "--k", "5"]
    pairs([*argv, "--threshold", str(THRESHOLD), "--method", "exact"], test_pipeline=local())
    expected = brute_force_pairs(ids, stored(vectors, "fixed32"), THRESHOLD)
    position = {name: n for n, name in enumerate(ids)}
    a, b = zip(*((position[x], position[y]) for x, y in expected), strict=True)
    graph = coo_matrix((np.ones(len(a)), (a, b)), shape=(len(ids), len(ids)))
    groups, _ = connected_components(graph, directed=False)
    options = ["--threshold", str(THRESHOLD), "--method", "components"]
    summary = dedup(["--pairs", str(out), "--output", str(tmp_path / "dedup"), *options])
    assert summary.rows_in == len(ids)  # every external id, kept or removed
    assert summary.removed == len(ids) - groups > 0  # one row kept per brute-force component


def test_index_flat_recall_is_one(tmp_path, planted):
    ids, vectors = planted
    data = write_dataset(tmp_path / "vectors", ids, vectors, "list16")
    out = tmp_path / "index"
    argv = ["--embeddings", str(data), *COLUMNS, "--text-column", "body"]
    argv += ["--model-name", "my-encoder", "--output", str(out), "--factory", "Flat"]
    argv += ["--queries", "50"]
    index(argv)
    held = stored(vectors, "list16")
    unit = held / np.linalg.norm(held, axis=1, keepdims=True)
    loaded = open_index(str(out))
    k = 5
    _, positions = loaded.index.search(unit, k)
    found_ids, texts = loaded.ids.lookup(positions.ravel())
    found = np.array(found_ids).reshape(positions.shape)
    exact = np.argsort(-(unit.astype(np.float64) @ unit.T.astype(np.float64)), axis=1)[:, :k]
    hits = sum(len(set(found[row]) & {ids[j] for j in exact[row]}) for row in range(len(ids)))
    assert hits / (len(ids) * k) == 1.0
    assert texts[:1] == [f"text of {found_ids[0]}"]
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["embeddings"]["manifest"]["model_id"] == "external: my-encoder"
    assert manifest["embeddings"]["directory"] == str(data)


def test_cluster_assigns_every_id(tmp_path, planted):
    ids, vectors = planted
    data = write_dataset(tmp_path / "vectors", ids, vectors, "fixed32")
    out = tmp_path / "clusters"
    argv = ["--embeddings", str(data), *COLUMNS, "--text-column", "body"]
    argv += ["--output", str(out), "--k", "4", "--sample", "300", "--seed", "1"]
    summary = cluster(argv, test_pipeline=local())
    assert "300 embeddings into 4 clusters" in summary.line()
    assignments = pq.read_table(sorted((out / "assignments").glob("part-*.parquet")))
    assert sorted(assignments.column("id").to_pylist()) == sorted(ids)


def one_file(folder, table: pa.Table):
    folder.mkdir()
    pq.write_table(table, folder / "part.parquet")
    return folder


def refusal_tables() -> dict[str, tuple[pa.Table, str]]:
    vectors = np.eye(4, dtype=np.float32) + 0.1
    good = [list(map(float, row)) for row in vectors]
    nan = [list(row) for row in good]
    nan[2][1] = float("nan")
    inf = [list(row) for row in good]
    inf[3][0] = float("inf")
    ragged = [list(row) for row in good]
    ragged[1] = ragged[1][:3]
    ids = ["a", "b", "c", "d"]
    f32 = pa.list_(pa.float32())
    return {
        "nan": (
            pa.table({"doc_id": ids, "vec": pa.array(nan, f32)}),
            "id 'c' in .* has NaN or infinite",
        ),
        "inf": (
            pa.table({"doc_id": ids, "vec": pa.array(inf, f32)}),
            "id 'd' in .* has NaN or infinite",
        ),
        "ragged": (pa.table({"doc_id": ids, "vec": pa.array(ragged, f32)}), "id 'b' has a vector"),
        "duplicate": (
            pa.table({"doc_id": ["a", "b", "a", "d"], "vec": pa.array(good, f32)}),
            "id 'a' occurs more than once",
        ),
        "null id": (
            pa.table({"doc_id": ["a", None, "c", "d"], "vec": pa.array(good, f32)}),
            "row 1 has a null id",
        ),
        "null vector": (
            pa.table({"doc_id": ids, "vec": pa.array([*good[:3], None], f32)}),
            "id 'd' has a null vector",
        ),
        "missing column": (
            pa.table({"doc_id": ids, "embedding": pa.array(good, f32)}),
            "no column 'vec' \\(--embedding-field\\)",
        ),
    }


@pytest.mark.parametrize("case", list(refusal_tables()))
def test_each_bad_dataset_is_refused_naming_the_id_or_column(tmp_path, case):
    table, message = refusal_tables()[case]
    data = one_file(tmp_path / "vectors", table)
    out = tmp_path / "out"
    argv = ["--embeddings", str(data), *COLUMNS, "--output", str(out), "--k", "1"]
    with pytest.raises(ValueError, match=message):
        pairs(argv)
    with pytest.raises(ValueError, match=message):
        index(["--embeddings", str(data), *COLUMNS, "--output", str(out), "--factory", "Flat"])
    with pytest.raises(ValueError, match=message):
        cluster(["--embeddings", str(data), *COLUMNS, "--output", str(out), "--k", "2"])
    assert not out.exists()


def test_mixing_with_an_embed_folder_of_another_model_is_refused(tmp_path, planted):
    ids, vectors = planted
    data = write_dataset(tmp_path / "vectors", ids, vectors, "fixed32")
    ours = write_embeddings(tmp_path / "ours", ["x1", "x2"], np.ones((2, DIM), np.float32))
    out = tmp_path / "out"
    for inputs in ([str(data), str(ours)], [str(ours), str(data)]):
        argv = ["--embeddings", *inputs, *COLUMNS, "--output", str(out), "--k", "2"]
        with pytest.raises(IncompatibleEmbeddingsError, match=r"weights_sha256: .*'external: "):
            pairs(argv)
        with pytest.raises(IncompatibleEmbeddingsError, match="external: "):
            cluster([*argv[:-2], "--k", "2"])
    assert not out.exists()


def test_two_external_datasets_pair_under_one_model_name(tmp_path, planted):
    ids, vectors = planted
    first = write_dataset(tmp_path / "a", ids[:150], vectors[:150], "fixed32", files=1)
    second = write_dataset(tmp_path / "b", ids[150:], vectors[150:], "list16", files=2)
    out = tmp_path / "out"
    argv = ["--embeddings", str(first), str(second), *COLUMNS, "--output", str(out)]
    argv += ["--threshold", str(THRESHOLD), "--method", "exact", "--k", "3"]
    with pytest.raises(IncompatibleEmbeddingsError, match="external: "):
        pairs(argv)  # two paths are two identities unless one name is given
    pairs([*argv, "--model-name", "shared"], test_pipeline=local())
    held = np.concatenate([stored(vectors[:150], "fixed32"), stored(vectors[150:], "list16")])
    table = read_pairs(str(out))
    found = set(
        zip(table.column("id_a").to_pylist(), table.column("id_b").to_pylist(), strict=True)
    )
    assert found == brute_force_pairs(ids, held, THRESHOLD)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--id-field", "doc_id"], "--id-field apply to external vectors"),
        (["--model-name", "m"], "--model-name apply to external vectors"),
        (["--embedding-field", "vec"], "--embedding-field needs --id-field"),
    ],
)
def test_column_flags_need_each_other(tmp_path, planted, extra, message):
    ids, vectors = planted
    data = write_dataset(tmp_path / "vectors", ids, vectors, "fixed32", files=1)
    with pytest.raises(ValueError, match=message):
        pairs(["--embeddings", str(data), *extra, "--output", str(tmp_path / "out")])


def test_a_folder_without_manifest_and_without_columns_is_refused_as_today(tmp_path, planted):
    ids, vectors = planted
    data = write_dataset(tmp_path / "vectors", ids, vectors, "fixed32", files=1)
    with pytest.raises(FileNotFoundError):
        pairs(["--embeddings", str(data), "--output", str(tmp_path / "out")])


@pytest.mark.parametrize("stage", ["pairs", "cluster", "index"])
def test_remote_workers_are_refused_before_any_output(tmp_path, planted, stage):
    """The converted vectors lie on this machine: a Dataflow run would fail on its workers."""
    ids, vectors = planted
    data = write_dataset(tmp_path / "vectors", ids, vectors, "fixed32")
    out = tmp_path / "out"
    argv = ["--embeddings", str(data), *COLUMNS, "--output", str(out)]
    argv += {
        "pairs": ["--method", "clustered"],
        "cluster": ["--k", "4"],
        "index": ["--shards", "2"],
    }[stage]
    remote = ["--runner=DataflowRunner", "--project=p", "--region=us-central1"]
    run = {"pairs": pairs, "cluster": cluster, "index": index}[stage]
    with pytest.raises(ValueError, match=r"--embedding-field: .* converted on this machine"):
        run([*argv, *remote, "--temp_location=gs://b/tmp"])
    assert not out.exists()
