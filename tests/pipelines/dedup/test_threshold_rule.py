"""``sbert dedup`` with its defaults removes a row only for a kept row it is at or above the
threshold to (by cosine, or by the verify score of verified pairs), splits a group over
``--max-group-size``, and states the largest group, the group sizes and the share removed."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
from sbert_pipeline.dedup.decide import pin
from sbert_pipeline.grouping.methods import group_items
from sbert_pipeline.grouping.pairs import IndexedPairs

from tests.jobs.test_dedup_job import write_embeddings, write_pairs
from tests.stage_commands import dedup as run

# A chain: each link 0.92 (above T = 0.9), rows two apart 0.85, the ends far apart.
CHAIN_IDS = [f"c{i}" for i in range(10)] + ["alone"]
CHAIN = [(f"c{i}", f"c{i + 1}", 0.92) for i in range(9)] + [
    (f"c{i}", f"c{i + 2}", 0.85) for i in range(8)
]


def _manifest(out) -> dict:
    return json.loads((out / "_manifest.json").read_text())


def _scores_to_kept(out) -> list[float | None]:
    """Every removed row's score to its kept row, as groups.parquet has it."""
    rows = pq.read_table(out / "groups.parquet").to_pylist()
    return [row["score"] for row in rows if not row["is_representative"]]


def _chain_args(tmp_path, pairs=CHAIN, ids=CHAIN_IDS, **pair_fields) -> list[str]:
    emb = write_embeddings(tmp_path / "emb", ids)
    found = write_pairs(tmp_path / "pairs", emb, pairs, **pair_fields)
    return ["--pairs", str(found), "--threshold", "0.9"]


def test_the_default_removes_no_chain_end_and_states_the_guard_figures(tmp_path):
    out = tmp_path / "dedup"
    summary = run([*_chain_args(tmp_path), "--output", str(out)])
    scores = _scores_to_kept(out)
    assert scores and all(score is not None and score >= 0.9 - 1e-6 for score in scores)
    groups = {row["id"]: row["group"] for row in pq.read_table(out / "groups.parquet").to_pylist()}
    assert groups.get("c0", -1) != groups.get("c9", -2)
    manifest = _manifest(out)
    assert manifest["largest_group"] == summary.largest == 3
    # Central ranking: c2 keeps c1 and c3 (0.92); c4, c6, c8 each keep the next link.
    assert manifest["group_sizes"] == {"2": 3, "3-5": 1, "6-20": 0, "21-100": 0, ">100": 0}
    assert manifest["removed_share"] == round(summary.removed / 11, 6)
    assert manifest["max_group_size"] == 1000 and manifest["split_groups"] == 0
    rule = manifest["threshold_rule"]
    assert (rule["holds"], rule["score"], rule["removed_below_threshold"]) == (True, "cosine", 0)
    line = summary.line()
    assert "largest 3; sizes 2: 3, 3-5: 1, 6-20: 0, 21-100: 0, >100: 0" in line
    assert f"removed {summary.removed} ({summary.removed / 11:.1%})" in line
    assert "below the threshold" not in line


def test_components_are_an_explicit_choice_that_says_it_removes_rows_below_t(tmp_path):
    out = tmp_path / "dedup"
    summary = run([*_chain_args(tmp_path), "--output", str(out), "--method", "components"])
    assert summary.largest == 10
    rule = _manifest(out)["threshold_rule"]
    # Kept c2 is >= T to c1 and c3 only: the 7 others are removed below T or chained.
    assert rule["holds"] is False and rule["removed_below_threshold"] == 7
    assert "may remove rows below the threshold to their kept row" in rule["note"]
    assert "(7 of 9 removed rows are below 0.9 or chained)" in summary.line()


def test_a_group_over_the_limit_is_split_and_the_run_says_so(tmp_path):
    out = tmp_path / "dedup"
    argv = [*_chain_args(tmp_path), "--output", str(out), "--method", "components"]
    summary = run([*argv, "--max-group-size", "4"])
    assert summary.largest <= 4 and summary.split_groups == 1
    assert all(score is not None and score >= 0.9 - 1e-6 for score in _scores_to_kept(out))
    manifest = _manifest(out)
    assert manifest["largest_group"] <= 4 and manifest["split_groups"] == 1
    assert "1 groups over --max-group-size 4 were split" in summary.line()
    # The dry run and the sweep count the split groups as the run publishes them.
    dry = run([*argv[:4], "--method", "components", "--dry-run", "--max-group-size", "4"])
    point = next(p for p in dry.sweep if p.threshold == 0.9)
    assert point.largest == dry.largest <= 4 and point.removed == summary.removed


def test_verified_pairs_are_grouped_by_their_verify_score(tmp_path):
    # The bi-encoder chains c0 .. c9 (cosines >= 0.85 written as the pairs' cosine column is
    # not read); the verify scores, dedup's edges, pass T = 0.5 only on a few links.
    verified = [(a, b, 0.9 if a in ("c0", "c1", "c5") and s > 0.9 else 0.1) for a, b, s in CHAIN]
    out = tmp_path / "dedup"
    argv = _chain_args(tmp_path, verified, threshold=-1, verify={"model": "cross-encoder"})
    argv[argv.index("--threshold") + 1] = "0.5"
    summary = run([*argv, "--output", str(out)])
    rows = pq.read_table(out / "groups.parquet").to_pylist()
    members = {}
    for row in rows:
        members.setdefault(row["group"], set()).add(row["id"])
    assert sorted(map(sorted, members.values())) == [["c0", "c1", "c2"], ["c5", "c6"]]
    assert summary.removed == 3 and all(s >= 0.5 for s in _scores_to_kept(out))
    rule = _manifest(out)["threshold_rule"]
    assert (rule["holds"], rule["score"]) == (True, "verify score")


def test_a_pinned_group_keeps_a_member_no_pinned_row_is_near_with_a_tight_method():
    # Rows 0, 1, 2: 1 is central (0.95 to 0, 0.92 to 2); 0 and 2 are 0.5 apart. Row 0 was
    # kept before (pinned): 1 joins it; 2 is not >= T to it, so a tight method keeps 2.
    pairs = IndexedPairs(
        np.array([0, 1, 0]), np.array([1, 2, 2]), np.array([0.95, 0.92, 0.5], np.float32)
    )
    rank = np.array([1, 0, 2])
    grouping = group_items("star", 3, pairs, 0.9, rank)
    assert grouping.n_groups == 1 and grouping.largest == 3
    pinned = np.array([True, False, False])
    tight = pin(grouping, pinned, rank, pairs, 0.9, chain=False)
    assert tight.kept.tolist() == [True, False, True] and tight.matched[1] == 0
    chained = pin(grouping, pinned, rank, pairs, 0.9, chain=True)
    assert chained.kept.tolist() == [True, False, False] and np.isnan(chained.matched_score[2])
