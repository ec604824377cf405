"""``--stable-keep``: rows a previous dedup version kept stay kept, group ids stay where
membership did not change, and the manifest, report and summary say what changed."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.dedup.decide import pin
from sbert_pipeline.dedup.options import deciding_settings, settings_changed
from sbert_pipeline.dedup.versions import read_id_list
from sbert_pipeline.grouping.methods import components_by_keep
from sbert_pipeline.grouping.pairs import IndexedPairs

from tests.jobs.test_dedup_job import write_embeddings, write_pairs
from tests.stage_commands import dedup as run

DAY1_PAIRS = [
    ("a1", "a2", 0.97),
    ("a2", "a3", 0.95),
    ("a1", "a3", 0.93),
    ("b1", "b2", 0.95),
    ("c1", "c2", 0.99),
]
DAY1_IDS = ["a1", "a2", "a3", "b1", "b2", "c1", "c2", "lone"]


def _day(tmp_path, name: str, ids: list[str], pairs, **model) -> list[str]:
    """Embeddings and pairs of one day; the dedup arguments that read them."""
    emb = write_embeddings(tmp_path / f"emb-{name}", ids, **model)
    found = write_pairs(tmp_path / f"pairs-{name}", emb, pairs)
    return ["--pairs", str(found), "--output", str(tmp_path / "dedup"), "--threshold", "0.9"]


def _groups(out) -> dict[frozenset[str], int]:
    """``{members: group id}`` of a groups.parquet."""
    table = pq.read_table(out / "groups.parquet").to_pylist()
    members: dict[int, set[str]] = {}
    for row in table:
        members.setdefault(row["group"], set()).add(row["id"])
    return {frozenset(items): group for group, items in members.items()}


def _manifest(out) -> dict:
    return json.loads((out / "_manifest.json").read_text())


@pytest.fixture
def yesterday(tmp_path):
    """Day 1 deduplicated with components, keep first (id order): kept a1, b1, c1, lone."""
    argv = _day(tmp_path, "1", DAY1_IDS, DAY1_PAIRS)
    run([*argv, "--method", "components", "--keep", "first"])
    out = tmp_path / "dedup"
    assert read_id_list(str(out / "kept_ids.txt")) == ["a1", "b1", "c1", "lone"]
    assert _manifest(out)["changes"] is None  # no previous version
    return tmp_path, out


# Day 2: a0 (first in id order) duplicates a1; d1 ~ d2 are new; c2 is gone.
DAY2_IDS = ["a0", *[i for i in DAY1_IDS if i != "c2"], "d1", "d2"]
DAY2_PAIRS = [p for p in DAY1_PAIRS if "c2" not in p[:2]] + [
    ("a0", "a1", 0.96),
    ("d1", "d2", 0.95),
]


def test_kept_rows_stay_kept_and_group_ids_are_stable(yesterday):
    tmp_path, out = yesterday
    before = _groups(out)
    argv = _day(tmp_path, "2", DAY2_IDS, DAY2_PAIRS)
    summary = run([*argv, "--method", "components", "--keep", "first", "--overwrite"])
    # a0 ranks first, but a1 was kept: the new row is the one removed.
    assert read_id_list(str(out / "kept_ids.txt")) == ["a1", "b1", "c1", "d1", "lone"]
    assert read_id_list(str(out / "removed_ids.txt")) == ["a0", "a2", "a3", "b2", "d2"]
    after = _groups(out)
    b_group = frozenset({"b1", "b2"})
    assert after[b_group] == before[b_group]  # same members, same id
    top = max(before.values())
    grown = after[frozenset({"a0", "a1", "a2", "a3"})]
    new = after[frozenset({"d1", "d2"})]
    assert grown > top and new > top and grown != new
    table = pq.read_table(out / "groups.parquet").to_pylist()
    (a1,) = [row for row in table if row["id"] == "a1"]
    (a0,) = [row for row in table if row["id"] == "a0"]
    assert a1["is_representative"] and a0["score"] == pytest.approx(0.96)

    manifest = _manifest(out)
    assert manifest["stable_keep"]["pinned"] is True
    assert manifest["stable_keep"]["rows_pinned"] == 4
    changes = manifest["changes"]
    assert changes["groups"] == {"unchanged": 1, "new": 1, "grown": 1, "changed": 0}
    assert changes["rows"] == {
        "new": 3,
        "gone": 1,
        "newly_removed": 2,
        "previously_kept_removed": 0,
        "newly_kept": 0,
    }
    assert manifest["incremental"]["mode"] == "full"
    assert "since the last run: 1 new groups, 1 grown, 2 rows newly removed" in summary.line()
    report = (out / "report.html").read_text()
    assert "Since the last run" in report and "rows newly removed" in report


def test_stable_keep_off_lets_the_keep_rule_decide(yesterday):
    tmp_path, out = yesterday
    argv = _day(tmp_path, "2", DAY2_IDS, DAY2_PAIRS)
    run([*argv, "--method", "components", "--keep", "first", "--overwrite", "--no-stable-keep"])
    kept = read_id_list(str(out / "kept_ids.txt"))
    assert "a0" in kept and "a1" not in kept
    manifest = _manifest(out)
    assert manifest["stable_keep"]["pinned"] is False
    assert "--no-stable-keep" in manifest["stable_keep"]["reason"]
    assert manifest["changes"]["rows"]["previously_kept_removed"] == 1


def test_a_changed_model_pins_nothing_and_says_why(yesterday, caplog):
    tmp_path, out = yesterday
    argv = _day(tmp_path, "2", DAY2_IDS, DAY2_PAIRS, weights_sha256="1" * 64)
    with caplog.at_level("INFO"):
        run([*argv, "--method", "components", "--keep", "first", "--overwrite"])
    assert "a0" in read_id_list(str(out / "kept_ids.txt"))
    stable = _manifest(out)["stable_keep"]
    assert stable["pinned"] is False and "weights_sha256" in stable["reason"]
    assert "weights_sha256" in caplog.text


@pytest.mark.parametrize("method", ["components", "star"])
def test_a_group_with_two_pinned_rows_keeps_both(yesterday, method):
    """x joins b1's group and lone (both kept yesterday): both stay kept, x goes to b1 (with
    star, a method yesterday's version was not made with, as --stable-keep asks)."""
    tmp_path, out = yesterday
    pairs = [*DAY1_PAIRS, ("x", "b1", 0.93), ("x", "lone", 0.91)]
    argv = _day(tmp_path, "2", [*DAY1_IDS, "x"], pairs)
    run([*argv, "--method", method, "--overwrite", "--stable-keep"])
    kept = read_id_list(str(out / "kept_ids.txt"))
    assert {"a1", "b1", "c1", "lone"} <= set(kept) and "x" not in kept
    table = {row["id"]: row for row in pq.read_table(out / "groups.parquet").to_pylist()}
    assert table["x"]["group"] == table["b1"]["group"] and table["b1"]["is_representative"]
    assert table["x"]["score"] == pytest.approx(0.93)
    assert "lone" not in table  # alone after the split


def test_a_rerun_on_the_same_data_changes_nothing(yesterday):
    tmp_path, out = yesterday
    before = _groups(out)
    pairs = str(tmp_path / "pairs-1")  # the same pairs again
    argv = ["--pairs", pairs, "--output", str(out), "--threshold", "0.9", "--overwrite"]
    run([*argv, "--method", "components", "--keep", "first"])  # yesterday's settings
    assert _groups(out) == before
    changes = _manifest(out)["changes"]
    assert changes["groups"]["unchanged"] == len(before)
    assert changes["rows"]["newly_removed"] == 0 == changes["rows"]["previously_kept_removed"]


def test_a_damaged_previous_version_pins_nothing_and_is_replaced(yesterday):
    tmp_path, out = yesterday
    (out / "kept_ids.txt").write_text("a2\nb2\nc2\nlone\n")  # same size, other digest
    argv = _day(tmp_path, "2", DAY2_IDS, DAY2_PAIRS)
    run([*argv, "--method", "components", "--keep", "first", "--overwrite"])
    stable = _manifest(out)["stable_keep"]
    assert stable["pinned"] is False and "cannot be read" in stable["reason"]
    assert _manifest(out)["changes"] is None
    assert "a0" in read_id_list(str(out / "kept_ids.txt"))  # the keep rule decided


def _random_pairs(rng, n: int, count: int) -> IndexedPairs:
    a = rng.integers(0, n, count)
    b = rng.integers(0, n, count)
    keep = a != b
    low, high = np.minimum(a, b)[keep], np.maximum(a, b)[keep]
    unique = np.unique(low * n + high)
    scores = rng.uniform(0.85, 1.0, len(unique)).astype(np.float32)
    return IndexedPairs(unique // n, unique % n, scores)


@pytest.mark.parametrize("seed", range(5))
def test_pin_keeps_every_pinned_row_and_leaves_other_groups_alone(seed):
    rng = np.random.default_rng(seed)
    n, threshold = 80, 0.9
    pairs = _random_pairs(rng, n, 90)
    rank = rng.permutation(n)
    before = components_by_keep(n, pairs, threshold, "first", order_rank=rank)
    pinned = rng.random(n) < 0.15
    after = pin(before, pinned, rank, pairs, threshold)
    assert np.all(after.kept[pinned])
    assert after.n_removed == int((~after.kept).sum())
    assert np.array_equal(np.bincount(after.group[after.group >= 0]), after.sizes)
    assert int(after.representative.sum()) == after.n_groups
    touched = np.isin(before.group, np.unique(before.group[pinned & (before.group >= 0)]))
    # Groups without pinned rows: same members, same representative.
    for g in np.unique(before.group[~touched & (before.group >= 0)]).tolist():
        rows = np.flatnonzero(before.group == g)
        assert len(np.unique(after.group[rows])) == 1
        assert np.flatnonzero(after.group == after.group[rows[0]]).tolist() == rows.tolist()
        assert np.array_equal(after.representative[rows], before.representative[rows])
    # In the others, every unpinned member is removed and joins the best pinned row it has a
    # pair >= T with (else the best-ranked pinned row of its old group).
    dense = {}
    for a, b, s in zip(pairs.a.tolist(), pairs.b.tolist(), pairs.scores.tolist(), strict=True):
        if s >= np.float32(threshold):
            dense[a, b] = dense[b, a] = s
    for row in np.flatnonzero(touched & ~pinned).tolist():
        assert not after.kept[row]
        mates = np.flatnonzero(pinned & (before.group == before.group[row])).tolist()
        scored = [(dense[row, p], -rank[p], p) for p in mates if (row, p) in dense]
        expected = max(scored)[2] if scored else min(mates, key=lambda p: rank[p])
        assert after.matched[row] == expected
        assert after.representative[expected]
        assert after.group[row] == after.group[expected]


@pytest.fixture
def at_096(tmp_path):
    """Day 1 at threshold 0.96 (components, keep first): only a1 ~ a2 and c1 ~ c2 join, so
    a3 and b2 are kept. Gives the output and the arguments of the same run at 0.9."""
    argv = [*_day(tmp_path, "1", DAY1_IDS, DAY1_PAIRS), "--method", "components", "--keep", "first"]
    argv[argv.index("--threshold") + 1] = "0.96"
    run(argv)
    out = tmp_path / "dedup"
    assert read_id_list(str(out / "kept_ids.txt")) == ["a1", "a3", "b1", "b2", "c1", "lone"]
    argv[argv.index("--threshold") + 1] = "0.9"
    return out, argv


def test_a_lowered_threshold_decides_afresh_and_says_why(at_096, tmp_path):
    out, argv = at_096
    summary = run([*argv, "--overwrite"])
    fresh = tmp_path / "fresh"
    argv[argv.index("--output") + 1] = str(fresh)
    run(argv)
    # As a fresh run at 0.9: a3 and b2 (kept at 0.96) are removed now.
    assert read_id_list(str(out / "kept_ids.txt")) == ["a1", "b1", "c1", "lone"]
    assert read_id_list(str(fresh / "kept_ids.txt")) == ["a1", "b1", "c1", "lone"]
    stable = _manifest(out)["stable_keep"]
    assert stable["option"] == "auto" and stable["pinned"] is False
    assert stable["settings_changed"] == ["threshold changed 0.96 -> 0.9"]
    assert (
        "decided afresh: threshold changed 0.96 -> 0.9 since the previous version; "
        "--stable-keep keeps its decisions" in summary.line()
    )
    assert "2 rows newly removed (2 of them kept before)" in summary.line()
    report = (out / "report.html").read_text()
    assert "not pinned: decided afresh: threshold changed 0.96 -&gt; 0.9" in report


def test_stable_keep_on_keeps_the_decisions_of_other_settings(at_096):
    out, argv = at_096
    summary = run([*argv, "--overwrite", "--stable-keep"])
    assert read_id_list(str(out / "kept_ids.txt")) == ["a1", "a3", "b1", "b2", "c1", "lone"]
    stable = _manifest(out)["stable_keep"]
    assert stable["option"] == "on" and stable["pinned"] is True
    assert stable["settings_changed"] == ["threshold changed 0.96 -> 0.9"]
    assert "kept again (--stable-keep), though threshold changed 0.96 -> 0.9" in summary.line()
    report = (out / "report.html").read_text()
    assert "kept again (--stable-keep, though threshold changed 0.96 -&gt; 0.9)" in report


def test_unchanged_settings_keep_the_decisions_and_say_so(yesterday):
    tmp_path, out = yesterday
    argv = _day(tmp_path, "2", DAY2_IDS, DAY2_PAIRS)
    summary = run([*argv, "--method", "components", "--keep", "first", "--overwrite"])
    assert "a1" in read_id_list(str(out / "kept_ids.txt"))  # a0 ranks first; a1 stays
    stable = _manifest(out)["stable_keep"]
    assert stable["pinned"] is True and stable["settings_changed"] == []
    assert "the previous version's kept rows kept again (same settings)" in summary.line()


@pytest.mark.parametrize(
    ("before", "after", "changed"),
    [
        ({"method": "star"}, {"method": "star", "mutual_k": 3}, []),  # star has no k
        ({"method": "mutual"}, {"method": "mutual", "mutual_k": 3}, ["mutual-k changed 10 -> 3"]),
        ({"method": "star"}, {"method": "star", "radius": 0.85}, ["radius changed 0.8 -> 0.85"]),
        ({"keep": "first"}, {"keep": "first", "seed": 4}, []),  # the seed orders random only
        ({"keep": "random"}, {"keep": "random", "seed": 4}, ["seed changed 0 -> 4"]),
        (
            {"method": "average"},
            {"method": "average", "missing_score": 0.1},
            ["missing-score changed 0 -> 0.1"],
        ),
        ({"method": "star"}, {"method": "components"}, ["method changed star -> components"]),
    ],
)
def test_only_the_settings_that_decide_groups_count(before, after, changed):
    base = dict(method="star", threshold=0.9, keep="central", radius=0.8, mutual_k=10)
    base.update(missing_score=0.0, seed=0)
    assert (
        settings_changed(
            deciding_settings(**{**base, **before}), deciding_settings(**{**base, **after})
        )
        == changed
    )
