"""``sbert dedup --against REF_EMBEDDINGS``: corpus rows that duplicate a reference row are
removed, reference rows never; checked against numpy brute force."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from dedup_reference import UnionFind
from sbert_pipeline.dedup.against import cross_pairs, reference_identity
from sbert_pipeline.dedup.versions import read_id_list
from sbert_pipeline.io.embeddings import EmbeddingsDataset, IncompatibleEmbeddingsError
from sbert_pipeline.stage_api.options import OptionError

from tests.jobs.test_dedup_job import write_pairs
from tests.planted_vectors import write_embeddings, write_embeddings_version
from tests.stage_commands import dedup as run

T = 0.9
AT_T = ["--threshold", str(T)]


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _planted(seed: int, n: int = 60, m: int = 25, dim: int = 16):
    """Corpus and reference vectors: some corpus rows are near copies of reference rows, some of
    other corpus rows; no cosine lies within 1e-3 of T (so float32 and float64 agree)."""
    rng = np.random.default_rng(seed)
    reference = _unit(rng.standard_normal((m, dim)))
    corpus = _unit(rng.standard_normal((n, dim)))
    for row in range(0, n, 4):  # a quarter copy a reference row (noise: cosine about 0.95)
        corpus[row] = _unit(reference[rng.integers(m)][None] + 0.08 * rng.standard_normal(dim))[0]
    for row in range(1, n - 1, 6):  # some copy another corpus row
        corpus[row] = _unit(corpus[row + 1][None] + 0.08 * rng.standard_normal(dim))[0]
    # Two reference rows near each other: they must both stay (never removed).
    reference[1] = _unit(reference[0][None] + 0.05 * rng.standard_normal(dim))[0]
    scores = np.concatenate([(corpus @ reference.T).ravel(), (corpus @ corpus.T).ravel()])
    assert not np.any(np.abs(scores - T) < 1e-3), "pick another seed"
    return corpus, reference


def _write(tmp_path, corpus, reference, **reference_fields):
    corpus_ids = [f"c{i:03d}" for i in range(len(corpus))]
    reference_ids = [f"r{j:03d}" for j in range(len(reference))]
    emb = write_embeddings(tmp_path / "emb", corpus_ids, corpus, shards=3)
    ref = write_embeddings(tmp_path / "ref", reference_ids, reference, **reference_fields)
    return emb, ref, corpus_ids, reference_ids


@pytest.mark.parametrize("seed", [1, 2])
def test_against_alone_removes_exactly_the_corpus_rows_with_a_reference_match(tmp_path, seed):
    corpus, reference = _planted(seed)
    emb, ref, corpus_ids, reference_ids = _write(tmp_path, corpus, reference)
    out = tmp_path / "dedup"
    summary = run([*AT_T, "--against", str(ref), "--embeddings", str(emb), "--output", str(out)])
    cosine = corpus.astype(np.float64) @ reference.T.astype(np.float64)
    matched = cosine.max(axis=1) >= T
    assert 5 < matched.sum() < len(corpus)  # the test means something
    expected_removed = {corpus_ids[i] for i in np.flatnonzero(matched)}
    kept = read_id_list(str(out / "kept_ids.txt"))
    removed = read_id_list(str(out / "removed_ids.txt"))
    assert set(removed) == expected_removed
    assert set(kept) == set(corpus_ids) - expected_removed
    assert len(kept) + len(removed) == len(corpus_ids) == summary.rows_in
    assert (summary.kept, summary.removed) == (len(kept), len(removed))
    assert not set(reference_ids) & (set(kept) | set(removed))

    table = pq.read_table(out / "groups.parquet").to_pylist()
    by_group: dict[int, list[dict]] = {}
    for row in table:
        by_group.setdefault(row["group"], []).append(row)
    for members in by_group.values():
        (head,) = [row for row in members if row["is_representative"]]
        assert head["reference"] and head["id"].startswith("r")
        for row in members:
            if row is head:
                continue
            assert not row["reference"]
            i, j = int(row["id"][1:]), int(head["id"][1:])
            assert j == int(np.argmax(cosine[i]))  # its most similar reference row
            assert row["score"] == pytest.approx(cosine[i, j], abs=1e-5)
    grouped = {row["id"] for row in table if not row["reference"]}
    assert grouped == expected_removed
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["against"]["corpus_rows_matched"] == int(matched.sum())
    assert manifest["against"]["rows"] == len(reference)
    assert manifest["pairs"] is None
    assert manifest["counts"]["kept"] + manifest["counts"]["removed"] == len(corpus)
    assert "match one of 25 reference rows" in summary.line()
    assert any(note.startswith("no --pairs: the corpus is not") for note in summary.notes)


def test_cross_pairs_equal_brute_force_in_small_batches(tmp_path):
    corpus, reference = _planted(1)
    emb, ref, _, _ = _write(tmp_path, corpus, reference)
    datasets = [EmbeddingsDataset.open(str(emb))]
    pairs = cross_pairs(datasets, [EmbeddingsDataset.open(str(ref))], T, len(corpus), 7)
    cosine = corpus @ reference.T
    rows, columns = np.nonzero(cosine >= T)
    assert pairs.a.tolist() == rows.tolist()
    assert (pairs.b - len(corpus)).tolist() == columns.tolist()
    np.testing.assert_allclose(pairs.scores, cosine[rows, columns], atol=1e-5)


def _components(n: int, edges: list[tuple[int, int]]) -> list[set[int]]:
    """Components of two or more rows (the reference union-find)."""
    sets = UnionFind(n)
    for a, b in edges:
        sets.union(int(a), int(b))
    out: dict[int, set[int]] = {}
    for x, root in enumerate(sets.roots().tolist()):
        out.setdefault(root, set()).add(x)
    return [members for members in out.values() if len(members) > 1]


def test_against_with_pairs_removes_whole_corpus_groups_that_touch_the_reference(tmp_path):
    corpus, reference = _planted(2)
    emb, ref, corpus_ids, _ = _write(tmp_path, corpus, reference)
    n, m = len(corpus), len(reference)
    inner = corpus.astype(np.float64) @ corpus.T
    found = [
        (corpus_ids[a], corpus_ids[b], float(inner[a, b]))
        for a, b in zip(*np.nonzero(np.triu(inner >= 0.8, 1)), strict=True)
    ]
    pairs = write_pairs(tmp_path / "pairs", emb, found, threshold=0.8)
    out = tmp_path / "dedup"
    argv = [*AT_T, "--pairs", str(pairs), "--against", str(ref), "--output", str(out)]
    run([*argv, "--method", "components", "--keep", "first"])
    # Brute force: components of corpus-corpus and corpus-reference pairs >= T; a component
    # with a reference row loses all its corpus rows, any other keeps its first row.
    cross = corpus.astype(np.float64) @ reference.T
    edges = [(a, b) for a, b in zip(*np.nonzero(np.triu(inner >= T, 1)), strict=True)]
    edges += [(a, n + j) for a, j in zip(*np.nonzero(cross >= T), strict=True)]
    removed = set()
    for members in _components(n + m, edges):
        rows = sorted(x for x in members if x < n)
        removed |= set(rows) if any(x >= n for x in members) else set(rows[1:])
    assert any(  # a corpus group was removed whole through one member's reference match
        any(x >= n for x in members) and sum(x < n for x in members) > 1
        for members in _components(n + m, edges)
    )
    assert set(read_id_list(str(out / "removed_ids.txt"))) == {corpus_ids[i] for i in removed}
    assert len(read_id_list(str(out / "kept_ids.txt"))) == n - len(removed)


def test_apply_writes_the_decontaminated_corpus(tmp_path):
    corpus, reference = _planted(1, n=20, m=8)
    corpus_ids = [f"c{i:03d}" for i in range(len(corpus))]
    source = tmp_path / "corpus.jsonl"
    source.write_text(
        "".join(json.dumps({"id": item, "text": f"text of {item}"}) + "\n" for item in corpus_ids)
    )
    spec = {"pattern": str(source), "id_field": "id", "text_field": "text"}
    emb = write_embeddings(tmp_path / "emb", corpus_ids, corpus, input=spec)
    ref = write_embeddings(tmp_path / "ref", [f"r{j}" for j in range(8)], reference, input=spec)
    out = tmp_path / "dedup"
    argv = [*AT_T, "--against", str(ref), "--embeddings", str(emb), "--output", str(out)]
    run([*argv, "--corpus", str(source), "--apply"])
    written = [json.loads(line)["id"] for line in (out / "corpus" / "corpus.jsonl").open()]
    assert written == read_id_list(str(out / "kept_ids.txt"))
    matched = (corpus @ reference.T).max(axis=1) >= T
    assert written == [item for item, hit in zip(corpus_ids, matched, strict=True) if not hit]
    report = (out / "report.html").read_text()
    assert "(reference)" in report
    removed = read_id_list(str(out / "removed_ids.txt"))
    assert removed and all(f"text of {item}" in report for item in removed)


def test_incompatible_reference_and_bad_inputs_are_refused(tmp_path):
    corpus, reference = _planted(1, n=20, m=8)
    emb, ref, _, _ = _write(tmp_path, corpus, reference, weights_sha256="1" * 64)
    argv = ["--embeddings", str(emb), "--output", str(tmp_path / "o"), "--threshold", str(T)]
    with pytest.raises(IncompatibleEmbeddingsError, match="weights_sha256"):
        run([*argv, "--against", str(ref)])
    assert not (tmp_path / "o").exists()
    with pytest.raises(OptionError, match="pairs"):
        run(argv)  # neither --pairs nor --against
    with pytest.raises(FileNotFoundError, match="--against"):
        run([*argv, "--against", str(tmp_path / "missing")])
    # A reference id that is also a corpus id would make the lists ambiguous.
    same = write_embeddings(tmp_path / "same", [f"c{i:03d}" for i in range(8)], reference)
    with pytest.raises(ValueError, match="both corpus and --against reference ids"):
        run([*argv, "--against", str(same)])


def test_the_reference_identity_follows_its_versions_and_the_job_checks_it(tmp_path):
    from sbert_pipeline.dedup.job_stage import JOB_STAGE
    from sbert_pipeline.dedup.options import Options

    _, reference = _planted(1, n=20, m=8)
    folder = tmp_path / "ref"
    write_embeddings_version(
        folder, {"part-a.parquet": ([f"r{j}" for j in range(4)], reference[:4])}
    )
    first = reference_identity([str(folder)])
    assert reference_identity([str(folder)]) == first  # same version, same identity
    parts = {
        "part-a.parquet": ([f"r{j}" for j in range(4)], reference[:4]),
        "part-b.parquet": ([f"r{j}" for j in range(4, 8)], reference[4:]),
    }
    write_embeddings_version(folder, parts)
    assert reference_identity([str(folder)]) != first  # a new version: dedup reruns
    options = Options(
        output=str(tmp_path / "o"),
        threshold=T,
        embeddings=(str(folder),),
        against=(str(tmp_path / "nowhere"),),
    )
    with pytest.raises(FileNotFoundError, match=r"dedup\.against"):
        JOB_STAGE.preflight(options)


def test_a_previously_kept_row_that_matches_a_new_reference_row_is_removed(tmp_path):
    """--stable-keep pins yesterday's kept rows, but a reference row wins (decontamination)."""
    corpus, reference = _planted(1)
    emb, _, corpus_ids, reference_ids = _write(tmp_path, corpus, reference)
    few = write_embeddings(tmp_path / "few", reference_ids[:10], reference[:10])
    out = tmp_path / "dedup"
    argv = [*AT_T, "--embeddings", str(emb), "--output", str(out)]
    run([*argv, "--against", str(few)])
    kept_before = set(read_id_list(str(out / "kept_ids.txt")))

    run([*argv, "--against", str(tmp_path / "ref"), "--overwrite"])  # --stable-keep on
    cosine = corpus.astype(np.float64) @ reference.T.astype(np.float64)
    matched = {corpus_ids[i] for i in np.flatnonzero(cosine.max(axis=1) >= T)}
    newly = matched & kept_before  # kept yesterday, matching one of the 15 added reference rows
    assert newly  # the test means something
    assert set(read_id_list(str(out / "removed_ids.txt"))) == matched
    assert set(read_id_list(str(out / "kept_ids.txt"))) == set(corpus_ids) - matched
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["stable_keep"]["pinned"] is True
    assert manifest["stable_keep"]["rows_pinned"] == len(kept_before - matched)
    assert manifest["changes"]["rows"]["previously_kept_removed"] == len(newly)
