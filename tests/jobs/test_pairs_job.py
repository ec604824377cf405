import json
import re
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace

import apache_beam.testing.test_pipeline as beam_testing
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from planted import unit_rows
from planted_vectors import clustered_vectors, write_embeddings
from sbert_pipeline.io.embeddings import EmbeddingsDataset, IncompatibleEmbeddingsError, all_shards
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.io.pairs_output import open_pairs_output, read_neighbors, read_pairs
from sbert_pipeline.io.schemas import NEIGHBORS_SCHEMA, PAIRS_SCHEMA
from sbert_pipeline.jobs.cli import main as cli_main
from sbert_pipeline.pairs.exact import run_exact
from sbert_pipeline.pairs.plan import exact_path, exact_worker_bytes, whole_matrix_bytes
from sbert_pipeline.pairs.transforms import PairsSettings
from sbert_pipeline.pairs.vector_reader import VectorReader, needs_normalizing

from tests.stage_commands import pairs as run

K, THRESHOLD, DIM = 10, 0.9, 24
TWINS, COPIES = 40, 14  # planted near-duplicate pairs; exact copies of one vector


def local():
    return beam_testing.TestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True)


class Planted:
    """Clustered background, near-duplicate twins of some rows, and a group of exact copies.

    Ids are shuffled numbers, so id order is not row order (ties must follow ids).
    """

    def __init__(self) -> None:
        rng = np.random.default_rng(5)
        background = clustered_vectors(1200, DIM, clusters=12, spread=0.8, seed=5)
        bases = rng.choice(len(background), TWINS, replace=False)
        twins = unit_rows(background[bases] + 0.03 * rng.standard_normal((TWINS, DIM)))
        copies = np.repeat(unit_rows(rng.standard_normal((1, DIM))), COPIES, axis=0)
        self.vectors = np.concatenate([background, twins, copies]).astype(np.float32)
        n = len(self.vectors)
        self.ids = [f"id{j}" for j in rng.permutation(n)]
        self.twin_pairs = [
            (self.ids[b], self.ids[len(background) + i]) for i, b in enumerate(bases)
        ]
        self.copy_ids = self.ids[len(background) + TWINS :]
        scores = self.vectors.astype(np.float64) @ self.vectors.T.astype(np.float64)
        self.scores = scores.astype(np.float32)
        np.fill_diagonal(self.scores, -np.inf)
        self.row = {i: r for r, i in enumerate(self.ids)}

    def score(self, a: str, b: str) -> float:
        return float(self.scores[self.row[a], self.row[b]])

    def kth(self, item: str) -> float:
        return float(np.sort(self.scores[self.row[item]])[-K])

    def pairs_above(self, threshold: float) -> dict[tuple[str, str], float]:
        a, b = np.nonzero(np.triu(self.scores >= np.float32(threshold), 1))
        return {
            (min(self.ids[x], self.ids[y]), max(self.ids[x], self.ids[y])): float(self.scores[x, y])
            for x, y in zip(a, b, strict=True)
        }


@pytest.fixture(scope="module")
def planted() -> Planted:
    return Planted()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, planted) -> list[Path]:
    root = tmp_path_factory.mktemp("pairs_inputs")
    half = 700
    first = write_embeddings(root / "a", planted.ids[:half], planted.vectors[:half], shards=3)
    second = write_embeddings(root / "b", planted.ids[half:], planted.vectors[half:], shards=1)
    known = root / "known.parquet"
    pq.write_table(
        pa.table(
            {"id_a": [a for a, _ in planted.twin_pairs], "id_b": [b for _, b in planted.twin_pairs]}
        ),
        known,
    )
    return [first, second, known]


def pairs_args(inputs, output, *extra) -> list[str]:
    return ["--embeddings", str(inputs[0]), str(inputs[1]), "--output", str(output), *extra]


@pytest.fixture(scope="module")
def exact(tmp_path_factory, inputs) -> Path:
    out = tmp_path_factory.mktemp("exact") / "pairs"
    extra = ["--k", str(K), "--threshold", str(THRESHOLD), "--ranges", "4"]
    run(pairs_args(inputs, out, *extra, "--method", "exact"), test_pipeline=local())
    return out


def clustered_args(inputs, output) -> list[str]:
    extra = ["--k", str(K), "--threshold", str(THRESHOLD), "--method", "clustered"]
    extra += ["--clusters", "40", "--target-recall", "0.9", "--tune-sample", "300"]
    extra += ["--recall-sample", "100000", "--shards", "3"]
    return pairs_args(inputs, output, *extra, "--known-pairs", str(inputs[2]))


@pytest.fixture(scope="module")
def clustered(tmp_path_factory, inputs) -> Path:
    out = tmp_path_factory.mktemp("clustered") / "pairs"
    run(clustered_args(inputs, out), test_pipeline=local())
    return out


def neighbour_lists(output: Path) -> dict[str, tuple[list[str], list[float]]]:
    table = read_neighbors(str(output))
    assert table.schema.equals(NEIGHBORS_SCHEMA)
    return {r["id"]: (r["neighbor_ids"], r["scores"]) for r in table.to_pylist()}


def check_pairs(output: Path, planted: Planted) -> dict[tuple[str, str], float]:
    """The written pairs: schema, id_a < id_b, each once, scores true; returns them."""
    table = read_pairs(str(output))
    assert table.schema.equals(PAIRS_SCHEMA)
    found = {}
    for row in table.to_pylist():
        key = (row["id_a"], row["id_b"])
        assert row["id_a"] < row["id_b"] and key not in found
        assert row["score"] == pytest.approx(planted.score(*key), abs=1e-5)
        found[key] = row["score"]
    return found


def test_exact_mode_equals_brute_force(exact, planted):
    lists = neighbour_lists(exact)
    assert sorted(lists) == sorted(planted.ids)
    for item, (neighbours, scores) in lists.items():
        assert len(neighbours) == K and item not in neighbours
        truth = np.array([planted.score(item, other) for other in neighbours])
        np.testing.assert_allclose(scores, truth, atol=1e-5)
        assert min(scores) >= planted.kth(item) - 1e-5  # the top-k set, up to ties
        # Most similar first, equal scores by id.
        ranked = list(zip(scores, neighbours, strict=True))
        assert all(s1 > s2 or (s1 == s2 and n1 < n2) for (s1, n1), (s2, n2) in pairwise(ranked))
    # Thirteen other copies tie at the top of each copy's list: the smallest ids are kept.
    for item in planted.copy_ids:
        others = sorted(set(planted.copy_ids) - {item})
        assert lists[item][0] == others[:K]

    found = check_pairs(exact, planted)
    truth = planted.pairs_above(THRESHOLD)
    boundary = {p for p, s in {**truth, **found}.items() if abs(s - THRESHOLD) < 1e-5}
    assert set(found) - boundary == set(truth) - boundary
    # The copies have 13 partners above T each, more than fit a list: all pairs are there.
    copies = sorted(planted.copy_ids)
    assert all((a, b) in found for i, a in enumerate(copies) for b in copies[i + 1 :])

    manifest = json.loads((exact / "_manifest.json").read_text())
    assert manifest["kind"] == "pairs" and manifest["method"] == "exact"
    assert manifest["k"] == K and manifest["threshold"] == THRESHOLD
    assert manifest["recall_at_k"] == 1.0 and manifest["recall"]["measured"] is False
    assert manifest["counts"] == {
        "items": len(planted.ids),
        "neighbor_rows": len(planted.ids),
        "short_lists": 0,
        "pairs": len(found),
    }
    assert manifest["pairs"]["complete"] == "every pair >= threshold (exact)"
    assert manifest["exact"]["ranges"] == 4 and manifest["model_id"] == "planted"
    assert len(manifest["embeddings"]) == 2 and manifest["normalized_here"] is False
    assert open_pairs_output(str(exact))["method"] == "exact"
    assert len(list((exact / "neighbors").glob("part-*.parquet"))) == 4
    assert not (exact / "_STARTED").exists() and not (exact / "_work").exists()


def test_clustered_mode_finds_the_planted_pairs_and_measures_its_recall(clustered, planted):
    lists = neighbour_lists(clustered)
    assert sorted(lists) == sorted(planted.ids)
    hits = 0
    for item, (neighbours, scores) in lists.items():
        assert item not in neighbours and len(set(neighbours)) == len(neighbours) <= K
        truth = np.array([planted.score(item, other) for other in neighbours])
        np.testing.assert_allclose(scores, truth, atol=1e-5)  # no invented scores
        exact_top = set(np.array(planted.ids)[np.argsort(-planted.scores[planted.row[item]])[:K]])
        hits += len(exact_top & set(neighbours))
    independent = hits / (K * len(planted.ids))

    manifest = json.loads((clustered / "_manifest.json").read_text())
    assert manifest["method"] == "clustered" and manifest["recall"]["measured"]
    assert manifest["recall"]["queries"] == len(planted.ids)  # every item is a query here
    assert manifest["recall_at_k"] == pytest.approx(independent, abs=0.01)
    assert 0.5 < manifest["recall_at_k"] < 1.0  # blocking loses some neighbours, measurably

    for item in planted.copy_ids:  # ties by id after merging lists from several blocks
        assert lists[item][0] == sorted(set(planted.copy_ids) - {item})[:K]

    found = check_pairs(clustered, planted)
    assert set(found) <= set(planted.pairs_above(THRESHOLD - 1e-5))
    for a, b in planted.twin_pairs:
        assert (min(a, b), max(a, b)) in found
    copies = sorted(planted.copy_ids)
    assert all((a, b) in found for i, a in enumerate(copies) for b in copies[i + 1 :])
    known = manifest["known_pairs"]
    assert known["pairs"] == TWINS and known["unknown_ids"] == 0
    assert known["recall_in_pairs"] == 1.0 and known["recall_in_neighbors"] == 1.0

    details = manifest["clustered"]
    choice = details["nprobe_choice"]
    assert details["clusters"] == 40 and details["output_shards"] == 3
    assert details["block_groups"] == 16  # at least 16 groups, one Beam element each
    assert details["nprobe"] == choice["nprobe"] > 1 and details["tuning_queries"] == 300
    assert choice["target_reached"] and choice["predicted_recall"] >= 0.9
    assert [c["nprobe"] for c in choice["curve"]] == list(range(1, details["nprobe"] + 1))
    assert choice["curve"][-2]["predicted_recall"] < 0.9  # the fewest probes that reach it
    # The tuning queries are among the recall queries here, whose recall it predicts exactly.
    assert manifest["recall_at_k"] == pytest.approx(choice["predicted_recall"], abs=0.05)
    assert details["blocks"]["vectors_searched"] == details["nprobe"] * len(planted.ids)
    assert details["blocks"]["searched"] <= details["blocks_planned"]
    assert (clustered / "centroids.npy").exists() and not (clustered / "_work").exists()


def _without_run_id(name):
    return re.sub(r"^part-[0-9a-f]{12}-", "part-", name)


def test_clustered_output_is_deterministic(clustered, inputs, tmp_path):
    again = tmp_path / "again"
    run(clustered_args(inputs, again), test_pipeline=local())
    for folder in ("neighbors", "pairs"):
        first = sorted((clustered / folder).glob("part-*.parquet"))
        second = sorted((again / folder).glob("part-*.parquet"))
        # Part names carry each run's id (issue 13: a rerun never replaces the parts it reads).
        assert [_without_run_id(p.name) for p in first] == [_without_run_id(p.name) for p in second]
        for one, two in zip(first, second, strict=True):
            assert pq.read_table(one).equals(pq.read_table(two))
    manifests = [json.loads((d / "_manifest.json").read_text()) for d in (clustered, again)]
    assert manifests[0]["recall_at_k"] == manifests[1]["recall_at_k"]


def test_unnormalised_vectors_without_threshold(tmp_path):
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((120, 8)).astype(np.float32) * rng.uniform(0.5, 3, (120, 1))
    ids = [f"u{i:03d}" for i in range(120)]
    source = write_embeddings(tmp_path / "emb", ids, vectors.astype(np.float32), normalized=False)
    out = tmp_path / "out"
    summary = run(["--embeddings", str(source), "--output", str(out), "--k", "3"])
    assert summary.method == "exact" and "exact" in summary.line()
    unit = unit_rows(vectors)
    for item, (neighbours, scores) in neighbour_lists(out).items():
        cosines = unit[[int(n[1:]) for n in neighbours]] @ unit[int(item[1:])]
        np.testing.assert_allclose(scores, cosines, atol=1e-5)
    pairs = read_pairs(str(out))
    assert pairs.num_rows == 0 and pairs.schema.equals(PAIRS_SCHEMA)
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["normalized_here"] and manifest["threshold"] is None
    assert manifest["pairs"] == {"count": 0, "threshold": None, "complete": None}


def test_empty_input_gives_empty_outputs(tmp_path):
    source = write_embeddings(tmp_path / "emb", [], np.zeros((0, 4), np.float32), shards=1)
    out = tmp_path / "out"
    run(["--embeddings", str(source), "--output", str(out), "--threshold", "0.5"])
    assert read_neighbors(str(out)).num_rows == 0 and read_pairs(str(out)).num_rows == 0
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["counts"]["items"] == 0 and manifest["method"] == "exact"


@pytest.fixture
def small(tmp_path):
    vectors = unit_rows(np.random.default_rng(0).standard_normal((20, 4)))
    return write_embeddings(tmp_path / "small", [f"s{i}" for i in range(20)], vectors)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--k", "20"], "more neighbours than the 20 embeddings"),
        (["--k", "0"], "--k: must be at least 1"),
        (["--threshold", "1.5"], r"in \[-1, 1\]"),
        (["--threshold", "-1.01"], r"in \[-1, 1\]"),
        (["--method", "exact", "--worker-memory", "1MB"], "use --method clustered"),
        (["--method", "exact", "--clusters", "3"], "--clusters: applies to --method clustered"),
        (["--method", "clustered", "--k", "2", "--clusters", "21"], "more than the 20"),
        (["--method", "clustered", "--k", "2", "--clusters", "3", "--nprobe", "4"], "--nprobe 4"),
        (["--method", "clustered", "--max-block", "5"], "must exceed --k"),
        (["--recall-sample", "-1"], "--recall-sample"),
        (["--known-pairs", "/nonexistent.parquet"], "no such file"),
    ],
)
def test_bad_options(small, tmp_path, extra, message):
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        run(["--embeddings", str(small), "--output", str(tmp_path / "out"), *extra])
    assert not (tmp_path / "out").exists()


def test_bad_inputs(small, tmp_path):
    out = str(tmp_path / "out")
    manifest = json.loads((small / "_manifest.json").read_text())
    model = {key: value for key, value in manifest.items() if key != "shards"}  # its own shards
    other = write_embeddings(
        tmp_path / "other", ["o1"], np.ones((1, 4), np.float32), **{**model, "dim": 8}
    )
    with pytest.raises(IncompatibleEmbeddingsError, match="dim"):
        run(["--embeddings", str(small), str(other), "--output", out])
    with pytest.raises(ValueError, match="1 embedding, no other item"):
        run(["--embeddings", str(other), "--output", out])
    with pytest.raises(ValueError, match="occur more than once"):
        run(["--embeddings", str(small), str(small), "--output", out])
    bad = unit_rows(np.ones((5, 4)))
    bad[2, 1] = np.nan
    nan_dir = write_embeddings(tmp_path / "nan", [f"n{i}" for i in range(5)], bad)
    with pytest.raises(ValueError, match="'n2' has NaN"):
        run(["--embeddings", str(nan_dir), "--output", out, "--k", "2"])
    with pytest.raises(FileNotFoundError, match="did not finish"):
        run(["--embeddings", str(tmp_path / "missing"), "--output", out])
    assert not (tmp_path / "out").exists()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "something").write_text("x")
    with pytest.raises(OutputExistsError):
        run(["--embeddings", str(small), "--output", out, "--k", "3"])


def test_cli_reports_bad_input_in_one_line(small, tmp_path, capsys):
    argv = ["pairs", "--embeddings", str(small), "--output", str(tmp_path / "o"), "--k", "25"]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("sbert: error: --k 25") and "\n" not in err


def _run_local(label, transform):
    """A ``run_exact`` runner: the transform as a whole pipeline on the FnApiRunner."""
    with local() as pipeline:
        _ = pipeline | label >> transform
    return SimpleNamespace(seconds=0.0, runner="FnApiRunner")


def _shards(output: Path) -> dict[str, pa.Table]:
    return {
        f"{folder}/{_without_run_id(path.name)}": pq.read_table(path)
        for folder in ("neighbors", "pairs")
        for path in sorted((output / folder).glob("part-*.parquet"))
    }


@pytest.mark.parametrize(("ranges", "threshold"), [(4, THRESHOLD), (7, None), (1, 0.5)])
def test_whole_matrix_search_writes_the_range_search_shards(inputs, tmp_path, ranges, threshold):
    # The copies tie at the top of each other's lists and have more partners above T than fit
    # a list; range bounds fall inside runs of ties (ids are shuffled). The one symmetric search
    # must write byte-for-byte the tables the per-range searches write.
    datasets = EmbeddingsDataset.open_many([str(inputs[0]), str(inputs[1])])
    n, dim = sum(d.count for d in datasets), datasets[0].dim
    reader = VectorReader(tuple(all_shards(datasets)), dim, needs_normalizing(datasets[0].manifest))
    found = {}
    for name, path, loaded in [
        ("ranges", "ranges", None),
        ("whole", "whole", None),
        ("in-process", "whole", reader.load_sorted()),
    ]:
        out = tmp_path / name
        settings = PairsSettings(str(out), reader, K, threshold)
        details, finished = run_exact(
            settings, n, dim, ranges, _run_local, 1 << 40, path=path, loaded=loaded
        )
        assert details["path"] == path and details["ranges"] == ranges
        assert finished.runner == ("in-process" if loaded else "FnApiRunner")
        found[name] = _shards(out)
    assert found["in-process"].keys() == found["ranges"].keys()
    for name, table in found["ranges"].items():
        assert found["in-process"][name].equals(table), name
    assert sorted(found["whole"]) == sorted(found["ranges"])
    assert len([name for name in found["whole"] if name.startswith("neighbors/")]) == ranges
    for name, table in found["ranges"].items():
        assert found["whole"][name].equals(table), name
    if threshold is not None:
        copies = sorted(Planted().copy_ids)
        pairs = pa.concat_tables(t for name, t in found["whole"].items() if "pairs/" in name)
        listed = set(zip(pairs["id_a"].to_pylist(), pairs["id_b"].to_pylist(), strict=True))
        assert all((a, b) in listed for i, a in enumerate(copies) for b in copies[i + 1 :])


def test_exact_mode_searches_the_whole_matrix_when_it_fits(exact, inputs, tmp_path):
    manifest = json.loads((exact / "_manifest.json").read_text())
    assert manifest["exact"]["path"] == "whole" and manifest["runner"] == "FnApiRunner"
    # Without a test pipeline the local run searches in the launcher: the same shards.
    out = tmp_path / "launcher"
    run(pairs_args(inputs, out, "--k", str(K), "--threshold", str(THRESHOLD), "--ranges", "4"))
    launched = json.loads((out / "_manifest.json").read_text())
    assert launched["runner"] == "in-process" and launched["exact"]["path"] == "whole"
    beam_shards = _shards(exact)
    assert _shards(out).keys() == beam_shards.keys()
    assert all(table.equals(beam_shards[name]) for name, table in _shards(out).items())
    n, dim = manifest["counts"]["items"], DIM
    assert manifest["exact"]["worker_bytes_needed"] == whole_matrix_bytes(n, dim, K, True)
    # A budget the range search fits and the whole-matrix search does not: query ranges.
    assert exact_path(n, dim, K, True, exact_worker_bytes(n, dim)) == "ranges"
    assert exact_path(n, dim, K, True, whole_matrix_bytes(n, dim, K, True)) == "whole"
