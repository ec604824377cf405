"""Dedup at scale (issue 29): the chosen method's sweep by default, the grouping over one
PairGraph equal to the per-threshold code it replaced, the memory budget refused before any
pair is read, and one progress bar (one ETA) for the whole sweep."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from dedup_reference import connected_components as reference_components
from dedup_reference import smallest_member
from sbert_pipeline.dedup.sources import (
    BASE_BYTES,
    BYTES_PER_PAIR,
    BYTES_PER_PREVIOUS_GROUPED_ROW,
    BYTES_PER_ROW,
    dedup_memory,
    pairs_to_load,
)
from sbert_pipeline.dedup.summary import NOT_COMPARED
from sbert_pipeline.grouping.adjacency import PairGraph
from sbert_pipeline.grouping.choices import METHODS
from sbert_pipeline.grouping.compare import MethodSettings, Ranker, sweep_methods
from sbert_pipeline.grouping.methods import group_items, sweep_groupings
from sbert_pipeline.grouping.model import dense_labels, grouping_from_labels
from sbert_pipeline.grouping.pairs import IndexedPairs
from sbert_pipeline.grouping.ranking import rank_items
from sbert_pipeline.io.pairs_output import PairsOutput
from sbert_pipeline.io.resources import ResourceError
from sbert_pipeline.jobs.cli import main as cli_main
from sbert_pipeline.stage_api.options import OptionError
from sbert_pipeline.vectors.progress import enable_progress

from sbert_core.graph import component_labels
from tests.jobs.test_dedup_job import CHAIN, write_embeddings, write_pairs
from tests.stage_commands import dedup as run

THRESHOLDS = [0.8, 0.85, 0.9, 0.95]


@pytest.fixture
def chain(tmp_path):
    ids = [f"p{i}" for i in range(5)] + ["q"]
    emb = write_embeddings(tmp_path / "emb", ids)
    return tmp_path, write_pairs(tmp_path / "pairs", emb, CHAIN)


def _manifest(folder) -> dict:
    return json.loads((folder / "_manifest.json").read_text())


# ------------------------------------------------------------------------- --sweep chosen|all


def test_the_sweep_runs_the_chosen_method_only_by_default(chain):
    root, pairs = chain
    out = root / "out"
    run(["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"])
    manifest = _manifest(out)
    assert [entry["method"] for entry in manifest["methods"]] == ["star"]
    assert manifest["methods_swept"] == "chosen" and "--sweep all" in manifest["methods_note"]
    # The chosen method's points are still the whole sweep.
    assert [p["threshold"] for p in manifest["methods"][0]["points"]] == [
        p["threshold"] for p in manifest["sweep"]
    ]
    page = (out / "report.html").read_text()
    assert (
        "Not compared" in page and "--sweep all" in page and '<th colspan="2">average' not in page
    )


def test_sweep_all_runs_every_method(chain):
    root, pairs = chain
    out = root / "out"
    run(["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9", "--sweep", "all"])
    manifest = _manifest(out)
    assert [entry["method"] for entry in manifest["methods"]] == [
        "star",
        *(m for m in METHODS if m != "star"),
    ]
    assert manifest["methods_swept"] == "all" and manifest["methods_note"] is None
    assert "Not compared" not in (out / "report.html").read_text()


def test_the_dry_run_says_the_comparison_was_not_run(chain, capsys):
    _, pairs = chain
    argv = ["dedup", "--pairs", str(pairs), "--threshold", "0.9", "--dry-run"]
    assert cli_main([*argv, "--method", "mutual"]) == 0
    printed = capsys.readouterr().out
    assert NOT_COMPARED in printed and "components" not in printed


def test_labels_calibrate_the_chosen_method_alone(chain):
    root, pairs = chain
    labels = root / "labels.tsv"
    labels.write_text("qid1\tqid2\tis_duplicate\np0\tp1\t1\np2\tq\t0\n")
    out = root / "out"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"]
    run([*argv, "--labels", str(labels), "--method", "components"])
    methods = _manifest(out)["methods"]
    assert [entry["method"] for entry in methods] == ["components"]
    assert methods[0]["best_f1"]["f1"] == pytest.approx(1.0)


def test_sweep_option_refuses_other_values(chain):
    _, pairs = chain
    with pytest.raises(SystemExit):
        run(["--pairs", str(pairs), "--threshold", "0.9", "--dry-run", "--sweep", "some"])


# --------------------------------------------- the grouping equals the code it replaced


def _random_pairs(seed: int, n: int, p: int) -> IndexedPairs:
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, n, p), rng.integers(0, n, p)
    keep = a != b
    a, b = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    _, first = np.unique(a * n + b, return_index=True)
    # Coarse scores: many ties, many pairs exactly on a threshold or a radius.
    scores = np.round(rng.uniform(0.7, 1.0, len(first)), 2).astype(np.float32)
    order = rng.permutation(len(first)) if seed % 2 else np.arange(len(first))
    return IndexedPairs(a[first][order], b[first][order], scores[order])


def _old_ranked_kernel(visit, rank, starts, others, scores):
    """The pure-Python form of the kernel the ranked rule ran before PairGraph."""
    leader = np.full(len(rank), -1, np.int64)
    kept = np.zeros(len(rank), bool)
    for i in visit:
        best, best_score = -1, -np.inf
        for position in range(starts[i], starts[i + 1]):
            j = others[position]
            if rank[j] < rank[i] and kept[j]:
                s = scores[position]
                if s > best_score or (s == best_score and rank[j] < rank[best]):
                    best, best_score = j, s
        if best < 0:
            kept[i] = True
        else:
            leader[i] = best
    return leader


def _old_ranked_grouping(method, n, edges, threshold, rank, pairs, radius=None):
    """The ranked rule as it was: the edges sorted by row at every call (argsort)."""
    both_ends = np.concatenate([edges.a, edges.b])
    others = np.concatenate([edges.b, edges.a])
    scores = np.concatenate([edges.scores, edges.scores])
    order = np.argsort(both_ends, kind="stable")
    starts = np.searchsorted(both_ends[order], np.arange(n + 1))
    visit = np.argsort(rank, kind="stable")
    leader = _old_ranked_kernel(visit, rank, starts, others[order], scores[order])
    rows = np.arange(n)
    labels = np.where(leader < 0, rows, leader)
    return grouping_from_labels(method, threshold, labels, rank, pairs, labels, radius)


def _old_star(n, pairs, threshold, rank, radius):
    used = pairs.above(threshold)
    # The components as the pure-Python union-find production used before scipy.
    component = reference_components(n, used)
    loose = pairs.above(radius)
    inside = component[loose.a] == component[loose.b]
    edges = IndexedPairs(loose.a[inside], loose.b[inside], loose.scores[inside])
    return _old_ranked_grouping("star", n, edges, threshold, rank, pairs, radius)


def _old_mutual(n, pairs, threshold, rank, k):
    used = pairs.above(threshold)
    row, other = np.concatenate([used.a, used.b]), np.concatenate([used.b, used.a])
    order = np.lexsort((other, -np.concatenate([used.scores, used.scores]), row))
    starts = np.searchsorted(row[order], np.arange(n))
    place = np.empty(len(row), np.int64)
    place[order] = np.arange(len(row)) - starts[row[order]]
    edge = (place[: len(used)] < k) & (place[len(used) :] < k)
    mutual_pairs = IndexedPairs(used.a[edge], used.b[edge], used.scores[edge])
    labels = smallest_member(reference_components(n, mutual_pairs))
    return grouping_from_labels("mutual", threshold, labels, rank, pairs)


def _same(new, old) -> None:
    for name in ("group", "representative", "sizes", "matched", "reason"):
        assert np.array_equal(getattr(new, name), getattr(old, name)), name
    assert np.array_equal(new.matched_score, old.matched_score, equal_nan=True)
    assert new.pairs_used == old.pairs_used


@pytest.mark.parametrize(("seed", "n", "p"), [(0, 1, 0), (1, 6, 4), (2, 60, 150), (3, 400, 2500)])
def test_star_ranked_and_mutual_equal_the_old_code_at_every_threshold(seed, n, p):
    pairs = _random_pairs(seed, n, p)
    graph = PairGraph(n, pairs)
    for threshold in THRESHOLDS:
        rank = rank_items("central", n, pairs=pairs, threshold=threshold)
        radius = round(threshold - 0.1, 6)
        old_ranked = _old_ranked_grouping(
            "ranked", n, pairs.above(threshold), threshold, rank, pairs
        )
        for shared in (graph, None):  # the sweep's one graph, and a call's own
            _same(group_items("ranked", n, pairs, threshold, rank, graph=shared), old_ranked)
            _same(
                group_items("star", n, pairs, threshold, rank, rep_threshold=radius, graph=shared),
                _old_star(n, pairs, threshold, rank, radius),
            )
            for k in (1, 3):
                _same(
                    group_items("mutual", n, pairs, threshold, rank, k=k, graph=shared),
                    _old_mutual(n, pairs, threshold, rank, k),
                )


@pytest.mark.parametrize("method", ["star", "ranked", "mutual"])
def test_the_sweep_over_one_graph_equals_one_call_per_threshold(method):
    n, pairs = 300, _random_pairs(5, 300, 1500)

    def rank_at(threshold):
        return rank_items("central", n, pairs=pairs, threshold=threshold)

    settings = MethodSettings(method=method, floor=0.7)
    swept = list(
        sweep_groupings(
            method, n, pairs, THRESHOLDS, rank_at, rep_threshold=settings.radius_at, k=2
        )
    )
    for threshold, grouping in zip(THRESHOLDS, swept, strict=True):
        alone = group_items(
            method,
            n,
            pairs,
            threshold,
            rank_at(threshold),
            rep_threshold=settings.radius_at(threshold),
            k=2,
        )
        _same(grouping, alone)


def test_pair_graph_lists_every_pair_from_both_ends_by_row():
    pairs = _random_pairs(7, 50, 200)
    graph = PairGraph(50, pairs)
    listed = {
        (row, int(other), float(score))
        for row in range(50)
        for other, score in zip(
            graph.others[graph.starts[row] : graph.starts[row + 1]],
            graph.scores[graph.starts[row] : graph.starts[row + 1]],
            strict=True,
        )
    }
    expected = {
        (int(x), int(y), float(s))
        for a, b, s in zip(pairs.a, pairs.b, pairs.scores, strict=True)
        for x, y in ((a, b), (b, a))
    }
    assert listed == expected and len(graph.others) == 2 * len(pairs)


@pytest.mark.parametrize("seed", range(4))
def test_dense_labels_equal_numpy_unique(seed):
    rng = np.random.default_rng(seed)
    n = 500
    for labels in (
        rng.integers(0, n, n),  # rows (representatives)
        component_labels(n, rng.integers(0, n, 300), rng.integers(0, n, 300)),
        rng.integers(0, 40 * n, n),  # too sparse for a bincount: numpy's unique
    ):
        _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
        place, count = dense_labels(labels)
        assert np.array_equal(place, inverse.reshape(-1)) and np.array_equal(count, counts)


# ------------------------------------------------------------------------------ memory budget


def test_the_budget_is_refused_before_any_pair_is_read(chain):
    root, pairs = chain
    manifest = _manifest(pairs)
    manifest["counts"] = {"items": 6, "pairs": len(CHAIN)}  # as sbert pairs writes it
    (pairs / "_manifest.json").write_text(json.dumps(manifest))
    for part in (pairs / "pairs").glob("*.parquet"):
        part.write_bytes(b"not parquet")  # reading a pair would fail otherwise
    out = root / "out"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"]
    with pytest.raises(
        ResourceError,
        match=r"dedup of 6 rows and 7 pairs .* process holds .* needs [0-9.]+ [MG]iB "
        r".*budget of .*--memory-budget 1MB",
    ):
        run([*argv, "--memory-budget", "1MB"])
    assert not out.exists()


def test_the_manifest_records_the_budget_and_the_peak(chain):
    root, pairs = chain
    out = root / "out"
    run(
        [
            "--pairs",
            str(pairs),
            "--output",
            str(out),
            "--threshold",
            "0.9",
            "--memory-budget",
            "2GB",
        ]
    )
    memory = _manifest(out)["memory"]
    assert (
        memory["budget"]["bytes"] == 2 * 10**9
        and "--memory-budget 2GB" in memory["budget"]["source"]
    )
    assert memory["rows"] == 6 and memory["pairs"] == len(CHAIN)
    held = memory["held_at_start_bytes"]
    assert held > 0 and memory["estimate_bytes"] == dedup_memory(6, len(CHAIN), held)
    assert memory["peak_rss_bytes"] > 0


def test_a_previous_version_in_the_output_is_counted(chain):
    root, pairs = chain
    out = root / "out"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"]
    run(argv)
    first = _manifest(out)["memory"]
    grouped = pq.read_metadata(out / "groups.parquet").num_rows
    assert first["previous_grouped_rows"] == 0 and grouped > 0
    run([*argv, "--overwrite"])
    again = _manifest(out)["memory"]
    assert again["previous_grouped_rows"] == grouped
    assert again["estimate_bytes"] == dedup_memory(
        6, len(CHAIN), again["held_at_start_bytes"], grouped
    )
    assert (
        again["estimate_bytes"] - dedup_memory(6, len(CHAIN), again["held_at_start_bytes"])
        == grouped * BYTES_PER_PREVIOUS_GROUPED_ROW
    )


def test_a_bad_budget_names_the_option(chain):
    _, pairs = chain
    with pytest.raises(OptionError, match="--memory-budget: cannot read the size 'lots'"):
        run(["--pairs", str(pairs), "--threshold", "0.9", "--dry-run", "--memory-budget", "lots"])


def test_the_estimate_grows_with_rows_and_pairs_and_counts_neighbour_lists(chain, tmp_path):
    assert dedup_memory(10, 100) - dedup_memory(0, 0) == 10 * BYTES_PER_ROW + 100 * BYTES_PER_PAIR
    # What the process already holds counts (inside sbert run: the earlier stages' leftovers),
    # and never less than the libraries' base.
    assert dedup_memory(10, 100, 3 * 2**30) - dedup_memory(10, 100) == 3 * 2**30 - BASE_BYTES
    assert dedup_memory(10, 100, 1) == dedup_memory(10, 100)
    _, pairs = chain
    output = PairsOutput.open(str(pairs))
    assert pairs_to_load(output, 0.9) == len(CHAIN)  # from the Parquet footers: no count
    counted = json.loads((pairs / "_manifest.json").read_text())
    counted["counts"] = {"pairs": 12345}
    assert pairs_to_load(PairsOutput(str(pairs), counted), 0.9) == 12345
    emb = write_embeddings(tmp_path / "emb2", ["x", "y", "z"])
    lists = {item: [("x", 0.5)] for item in ("x", "y", "z")}
    below = write_pairs(tmp_path / "pairs2", emb, [("x", "y", 0.9)], neighbors=lists, k=4)
    # Below the pairs' threshold (0.8) the neighbour lists are read too: 3 rows of k = 4.
    assert pairs_to_load(PairsOutput.open(str(below)), 0.7) == 1 + 3 * 4


# ------------------------------------------------------------------------------- one ETA


@pytest.mark.parametrize(("methods", "what"), [(("star",), "star"), (METHODS, "6 methods")])
def test_one_progress_bar_counts_the_whole_sweep(methods, what):
    n, pairs = 80, _random_pairs(9, 80, 300)
    stream = io.StringIO()
    enable_progress(stream=stream, interval=0.0)
    try:
        settings = MethodSettings(method="star", floor=0.7)
        ranker = Ranker(settings, n, pairs, np.arange(n))
        sweep_methods(settings, pairs, THRESHOLDS, ranker, methods=methods)
    finally:
        enable_progress(False)
    lines = stream.getvalue().splitlines()
    total = len(THRESHOLDS) * len(methods)
    assert lines and all(line.startswith(f"dedup sweep ({what}): ") for line in lines)
    assert all(f"/{total} thresholds" in line for line in lines)
    assert lines[-1].startswith(f"dedup sweep ({what}): {total}/{total} ")


@pytest.mark.parametrize(
    ("order", "distinct"),
    [([2, 0, 1], True), ([0, 0, 2], False), ([5, -3, 9], True), ([5, 9, 5], False)],
)
def test_rank_items_checks_the_order_rank_without_sorting_it(order, distinct):
    order = np.array(order, np.int64)
    if distinct:
        assert (
            rank_items("first", 3, order_rank=order).tolist()
            == np.argsort(np.argsort(order)).tolist()
        )
    else:
        with pytest.raises(ValueError, match="3 distinct integers"):
            rank_items("first", 3, order_rank=order)
