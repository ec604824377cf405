"""``sbert pairs --incremental``: an incremental run on yesterday's output equals a from-scratch
run on today's embeddings (same pairs at or above the threshold, same top-k lists in the same
order, the same score bits), for appended, changed and removed parts and two embeddings inputs;
a changed model or changed settings make a full run, recorded in the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from planted import unit_rows
from planted_vectors import clustered_vectors, write_embeddings_version
from sbert_pipeline import pairs
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.io.pairs_output import read_neighbors, read_pairs
from sbert_pipeline.io.previous_output import NOT_ASKED
from sbert_pipeline.vectors.tile_topk import final_scores

from tests.stage_commands import pairs as run_pairs

K, DIM = 6, 16


class Corpus:
    """Parts of planted vectors: clustered background, near-duplicates of other parts' rows
    (so old rows' lists gain new neighbours), and exact copies across parts (ties by id)."""

    def __init__(self) -> None:
        rng = np.random.default_rng(3)
        base = clustered_vectors(640, DIM, clusters=8, spread=0.7, seed=3)
        copy = unit_rows(rng.standard_normal((1, DIM)))
        self.parts: dict[str, tuple[list[str], np.ndarray]] = {}
        names = ("a", "b", "c", "d")
        for index, name in enumerate(names):
            vectors = base[index * 160 : (index + 1) * 160].copy()
            vectors[:3] = copy  # three exact copies in every part
            if index:  # twins of the previous part's rows
                previous = self.parts[f"part-{names[index - 1]}.parquet"][1]
                vectors[3:23] = unit_rows(previous[30:50] + 0.02 * rng.standard_normal((20, DIM)))
            # Shuffled ids: id order is not row order, so ties must follow ids.
            ids = [f"{name}{j:03d}" for j in rng.permutation(160)]
            self.parts[f"part-{name}.parquet"] = (ids, vectors.astype(np.float32))

    def part(self, name: str) -> tuple[list[str], np.ndarray]:
        return self.parts[f"part-{name}.parquet"]

    def changed(self, name: str) -> tuple[list[str], np.ndarray]:
        """Part ``name`` with the same ids and a third of its vectors moved (rows 40..90)."""
        ids, vectors = self.part(name)
        vectors = vectors.copy()
        rng = np.random.default_rng(11)
        vectors[40:90] = unit_rows(vectors[40:90] + 0.5 * rng.standard_normal((50, DIM)))
        return ids, vectors


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus()


@pytest.fixture(scope="module")
def threshold(corpus) -> float:
    """The exact score of a twin pair across parts c and d: that pair sits at the threshold."""
    _, c = corpus.part("c")
    _, d = corpus.part("d")
    both = np.concatenate([c, d])
    score = final_scores(both, np.array([30]), np.array([len(c) + 3]))[0]
    return float(score)


def options(embeddings: list[Path], output: Path, threshold: float, **extra) -> pairs.Options:
    values = {
        "embeddings": tuple(str(e) for e in embeddings),
        "output": str(output),
        "k": K,
        "threshold": threshold,
        "method": "exact",
        "ranges": 3,
        **extra,
    }
    return pairs.Options(**values)


def publish(directory: Path, parts: dict, *, replaced: tuple[str, ...] = (), **fields) -> None:
    """A version of an embeddings folder; ``replaced`` parts are rewritten (new digests)."""
    for name in replaced:
        (directory / f"part-{name}.parquet").unlink()
    write_embeddings_version(
        directory, {f"part-{n}.parquet": v for n, v in parts.items()}, **fields
    )


def assert_same_output(incremental: Path, scratch: Path) -> None:
    """Same lists (ids, order, scores) and the same pairs as the from-scratch run."""
    got, want = (read_neighbors(str(p)).sort_by("id") for p in (incremental, scratch))
    assert got["id"].to_pylist() == want["id"].to_pylist()
    assert got["neighbor_ids"].to_pylist() == want["neighbor_ids"].to_pylist()
    # Every score is the one final score (float64 sums of the float32 products, rounded): the
    # same bits whichever run found the pair, so no tolerance is needed.
    assert got["scores"].to_pylist() == want["scores"].to_pylist()
    sort = [("id_a", "ascending"), ("id_b", "ascending")]
    got_pairs, want_pairs = (read_pairs(str(p)).sort_by(sort) for p in (incremental, scratch))
    assert got_pairs.to_pylist() == want_pairs.to_pylist()
    # Shards as the full run writes them: one per range in id order.
    for folder in ("neighbors", "pairs"):
        shards = [
            sorted(f.name.split("-", 2)[2] for f in (p / folder).glob("*.parquet"))
            for p in (incremental, scratch)
        ]
        assert shards[0] == shards[1]


# (yesterday's parts per input, today's parts per input, parts rewritten today)
SCENARIOS = {
    "appended": ([("a", "b", "c")], [("a", "b", "c", "d")], ()),
    "changed": ([("a", "b", "c")], [("a", "b", "c")], ("b",)),
    "removed": ([("a", "b", "c")], [("a", "c")], ()),
    "removed and appended": ([("a", "b", "c")], [("a", "c", "d")], ()),
    "changed and appended": ([("a", "b", "c")], [("a", "b", "c", "d")], ("c",)),
    "mostly new": ([("a", "b", "c")], [("a", "b", "d")], ("b",)),
    "two inputs": ([("a", "b"), ("c",)], [("a", "b"), ("c", "d")], ("b",)),
}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_incremental_equals_from_scratch(corpus, threshold, tmp_path, scenario):
    before, after, replaced = SCENARIOS[scenario]
    folders = [tmp_path / f"emb{i}" for i in range(len(before))]
    for folder, names in zip(folders, before, strict=True):
        publish(folder, {name: corpus.part(name) for name in names})
    out = tmp_path / "pairs"
    first = pairs.run(options(folders, out, threshold))
    assert first.manifest["incremental"] == {"mode": "full", "reason": NOT_ASKED}

    for folder, names in zip(folders, after, strict=True):
        ours = [name for name in replaced if name in names]
        parts = {n: corpus.changed(n) if n in ours else corpus.part(n) for n in names}
        publish(folder, parts, replaced=tuple(ours))
    # No --overwrite: --incremental replaces the stage's own previous output.
    result = pairs.run(options(folders, out, threshold, incremental=True))
    scratch = pairs.run(options(folders, tmp_path / "scratch", threshold))
    assert_same_output(out, tmp_path / "scratch")

    section = result.manifest["incremental"]
    if scenario == "mostly new":  # 320 of 480 rows: a full run, recorded
        assert section == {"mode": "full", "reason": "320 of 480 rows are new (more than 50%)"}
        return
    assert section["mode"] == "incremental"
    assert section["previous_created"] == first.manifest["created"]
    old = sum(160 for names in after for n in names if n not in replaced and n != "d")
    n = scratch.manifest["counts"]["items"]
    gone = first.manifest["counts"]["items"] - old
    assert (section["rows_old"], section["rows_new"], section["rows_gone"]) == (old, n - old, gone)
    assert section["pairs_kept"] + section["pairs_added"] == scratch.manifest["pairs"]["count"]
    assert section["lists_searched"] >= n - old
    assert result.manifest["exact"]["path"] == "incremental"
    assert "incremental:" in result.summary.line()
    if gone:  # lists that named a removed or changed row were searched again
        assert section["lists_researched"] > 0
    if "d" in after[-1]:  # d's twins of c's rows entered c's lists
        assert section["lists_updated"] > 0


def test_the_pair_at_the_threshold_is_kept(corpus, threshold, tmp_path):
    emb = tmp_path / "emb"
    publish(emb, {n: corpus.part(n) for n in ("a", "c")})
    out = tmp_path / "pairs"
    pairs.run(options([emb], out, threshold))
    publish(emb, {n: corpus.part(n) for n in ("a", "c", "d")})
    # As the command line runs it: sbert pairs ... --incremental (no --overwrite).
    argv = ["--embeddings", str(emb), "--output", str(out), "--k", str(K), "--method", "exact"]
    summary = run_pairs([*argv, "--threshold", repr(threshold), "--ranges", "3", "--incremental"])
    assert "incremental: 160 new rows searched, 320 reused, 0 gone" in summary.line()
    key = (corpus.part("c")[0][30], corpus.part("d")[0][3])
    found = {(r["id_a"], r["id_b"]): r["score"] for r in read_pairs(str(out)).to_pylist()}
    assert found[tuple(sorted(key))] == np.float32(threshold)


def test_a_changed_model_or_setting_is_a_full_run(corpus, threshold, tmp_path, caplog):
    emb = tmp_path / "emb"
    publish(emb, {n: corpus.part(n) for n in ("a", "b")})
    out = tmp_path / "pairs"
    pairs.run(options([emb], out, threshold))
    publish(emb, {n: corpus.part(n) for n in ("a", "b", "d")}, weights_sha256="1" * 64)
    with caplog.at_level("INFO", logger="sbert_pipeline.io.previous_output"):
        result = pairs.run(options([emb], out, threshold, incremental=True))
    section = result.manifest["incremental"]
    assert section["mode"] == "full"
    assert "weights_sha256" in section["reason"] and "full run" in caplog.text
    scratch = tmp_path / "scratch"
    pairs.run(options([emb], scratch, threshold))
    assert_same_output(out, scratch)

    again = pairs.run(options([emb], out, threshold, incremental=True, k=K - 1))
    assert again.manifest["incremental"]["reason"] == f"k changed ({K} before, {K - 1} now)"


def test_incremental_never_replaces_what_it_did_not_write(corpus, threshold, tmp_path):
    emb = tmp_path / "emb"
    publish(emb, {n: corpus.part(n) for n in ("a", "b")})
    out = tmp_path / "pairs"
    pairs.run(options([emb], out, threshold))
    (out / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="did not write"):
        pairs.run(options([emb], out, threshold, incremental=True))
    other = tmp_path / "other"
    other.mkdir()
    (other / "_manifest.json").write_text(json.dumps({"kind": "embeddings"}))
    with pytest.raises(OutputExistsError):
        pairs.run(options([emb], other, threshold, incremental=True))


def test_incremental_never_replaces_a_verified_pairs_folder(corpus, threshold, tmp_path):
    emb = tmp_path / "emb"
    publish(emb, {n: corpus.part(n) for n in ("a", "b")})
    out = tmp_path / "pairs"
    pairs.run(options([emb], out, threshold))
    # What sbert verify publishes is also ``kind: pairs``, with its cross-encoder scores.
    manifest = json.loads((out / "_manifest.json").read_text())
    (out / "_manifest.json").write_text(json.dumps({**manifest, "verify": {"counts": {}}}))
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(OutputExistsError, match="--overwrite"):
        pairs.run(options([emb], out, threshold, incremental=True))
    assert sorted(p.name for p in out.rglob("*")) == before
    result = pairs.run(options([emb], out, threshold, incremental=True, overwrite=True))
    assert result.manifest["incremental"] == {
        "mode": "full",
        "reason": "the previous output was rewritten by sbert verify",
    }
