"""``sbert dedup`` end to end: outputs, counts, bad input, the corpus written back, planted data."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from corpus_files import write_corpus
from sbert_pipeline.dedup.versions import GROUPS_SCHEMA, read_id_list
from sbert_pipeline.io.corpus_files import open_decompressed
from sbert_pipeline.io.corpus_reader import CorpusRecord, CorpusSpec, read_corpus_file
from sbert_pipeline.io.embeddings import IncompatibleEmbeddingsError
from sbert_pipeline.io.output_dir import OutputExistsError
from sbert_pipeline.io.schemas import ERRORS_DIR, ERRORS_SCHEMA, embeddings_table
from sbert_pipeline.jobs.cli import main as cli_main
from testdata import DATA_DIR, read_tsv

from tests.stage_commands import dedup as run

MODEL = {
    "model_id": "planted",
    "weights_sha256": "0" * 64,
    "pooling": "mean",
    "normalized": True,
    "max_seq_length": 48,
}


def write_embeddings(
    directory: Path,
    ids: list[str],
    *,
    texts: list[str] | None = None,
    input_spec: dict | None = None,
    rejected: tuple[str, ...] = (),
    dim: int = 4,
    **manifest_fields,
) -> Path:
    """An embeddings/ directory (random vectors; dedup reads only ids and texts)."""
    directory.mkdir(parents=True)
    vectors = np.random.default_rng(0).standard_normal((len(ids), dim)).astype(np.float32)
    for i, rows in enumerate(np.array_split(np.arange(len(ids)), 2)):
        table = embeddings_table(
            [ids[r] for r in rows],
            vectors[rows],
            np.full(len(rows), 5, np.int32),
            np.zeros(len(rows), bool),
            texts=None if texts is None else [texts[r] for r in rows],
        )
        pq.write_table(table, directory / f"part-{i:05d}-of-00002.parquet")
    (directory / ERRORS_DIR).mkdir()
    errors = [
        {"id": r, "source": f"x:{i}", "reason": "bad", "excerpt": ""}
        for i, r in enumerate(rejected)
    ]
    pq.write_table(
        pa.Table.from_pylist(errors, schema=ERRORS_SCHEMA),
        directory / ERRORS_DIR / "part-00000-of-00001.parquet",
    )
    manifest = {
        "kind": "embeddings",
        **MODEL,
        "dim": dim,
        "keep_text": texts is not None,
        "input": input_spec or {"pattern": "corpus/*", "id_field": "id", "text_field": "text"},
        **manifest_fields,
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    return directory


def write_pairs(
    directory: Path,
    embeddings: Path,
    pairs: list[tuple[str, str, float]],
    *,
    threshold: float | None = 0.8,
    neighbors: dict[str, list[tuple[str, float]]] | None = None,
    k: int = 3,
    **manifest_fields,
) -> Path:
    """A pairs/ output as ``sbert pairs`` writes it (docs/architecture.md, ``pairs/``)."""
    (directory / "pairs").mkdir(parents=True)
    (directory / "neighbors").mkdir()
    rows = [{"id_a": min(a, b), "id_b": max(a, b), "score": s} for a, b, s in pairs]
    schema = pa.schema([("id_a", pa.string()), ("id_b", pa.string()), ("score", pa.float32())])
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        pq.write_table(
            pa.Table.from_pylist(part, schema=schema),
            directory / "pairs" / f"part-{i:05d}-of-00002.parquet",
        )
    if neighbors is not None:
        table = pa.Table.from_pylist(
            [
                {"id": item, "neighbor_ids": [n for n, _ in found], "scores": [s for _, s in found]}
                for item, found in neighbors.items()
            ],
            schema=pa.schema(
                [
                    ("id", pa.string()),
                    ("neighbor_ids", pa.list_(pa.string())),
                    ("scores", pa.list_(pa.float32())),
                ]
            ),
        )
        pq.write_table(table, directory / "neighbors" / "part-00000-of-00001.parquet")
    embeddings_manifest = json.loads((embeddings / "_manifest.json").read_text())
    manifest = {
        "kind": "pairs",
        **MODEL,
        "method": "exact",
        "k": k,
        "threshold": threshold,
        "embeddings": [{"directory": str(embeddings), "manifest": embeddings_manifest}],
        **manifest_fields,
    }
    (directory / "_manifest.json").write_text(json.dumps(manifest))
    return directory


def manifest_of(directory: Path) -> dict:
    return json.loads((directory / "_manifest.json").read_text())


TEXTS = {
    "a1": "How do I learn Python?",
    "a2": "How do I learn python",
    "a3": "How can I learn Python?",
    "b1": "What is the capital of France?",
    "b2": "What's the capital of France?",
    "c1": "<script>alert('x')</script> is not a question",
    "c2": "<script>alert('x')</script> is not a question!",
    "lone": "Nothing like me here.",
    "lone2": "Nor me.",
}
PAIRS = [
    ("a1", "a2", 0.97),
    ("a2", "a3", 0.91),
    ("a1", "a3", 0.88),
    ("b1", "b2", 0.95),
    ("c1", "c2", 0.99),
    ("lone", "b1", 0.81),
]


@pytest.fixture
def small(tmp_path):
    ids = list(TEXTS)
    emb = write_embeddings(tmp_path / "emb", ids, texts=[TEXTS[i] for i in ids])
    pairs = write_pairs(tmp_path / "pairs", emb, PAIRS)
    return tmp_path, pairs


def test_groups_lists_report_and_manifest(small):
    root, pairs = small
    out = root / "dedup"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"]
    summary = run([*argv, "--method", "components", "--keep", "first"])
    assert (summary.rows_in, summary.groups, summary.removed, summary.kept) == (9, 3, 4, 5)
    groups = pq.read_table(out / "groups.parquet")
    assert groups.schema == GROUPS_SCHEMA
    rows = groups.to_pylist()
    # Groups by size, the representative first; "first" falls back to id order here.
    assert [(r["id"], r["group"], r["is_representative"], r["size"]) for r in rows] == [
        ("a1", 0, True, 3),
        ("a2", 0, False, 3),
        ("a3", 0, False, 3),
        ("b1", 1, True, 2),
        ("b2", 1, False, 2),
        ("c1", 2, True, 2),
        ("c2", 2, False, 2),
    ]
    assert rows[1]["score"] == pytest.approx(0.97) and rows[2]["score"] is None  # a1-a3 < T
    assert read_id_list(str(out / "kept_ids.txt")) == ["a1", "b1", "c1", "lone", "lone2"]
    assert read_id_list(str(out / "removed_ids.txt")) == ["a2", "a3", "b2", "c2"]
    manifest = manifest_of(out)
    assert manifest["kind"] == "dedup" and manifest["keep"] == "first"
    assert manifest["counts"] == {
        "rows_in": 9,
        "kept": 5,
        "removed": 4,
        "groups": 3,
        "grouped": 7,
        "singletons": 2,
        "largest_group": 3,
    }
    assert manifest["pairs"]["used"] == 4 and manifest["pairs"]["source"] == "pairs"
    assert manifest["pairs_manifest"]["threshold"] == 0.8
    assert manifest["first_order"].startswith("id order")
    assert manifest["texts"]["found"] == 7
    sweep = {point["threshold"]: point for point in manifest["sweep"]}
    assert sweep[0.8]["removed"] == 5 and sweep[0.9]["removed"] == 4 and sweep[0.99]["removed"] == 1
    assert sum(manifest["histogram"]["counts"]) == len(PAIRS)
    page = (out / "report.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert" in page
    assert "How can I learn Python?" in page
    # The stage's own report states the share removed and the group sizes, as the job's does.
    assert f"({manifest['removed_share']:.1%} of the rows)" in page
    assert "groups by size" in page and "3-5: 1" in page
    assert not (out / "_STARTED").exists()


@pytest.mark.parametrize(("keep", "kept"), [("longest", "a3"), ("central", "a2")])
def test_keep_policies(small, keep, kept):
    root, pairs = small
    out = root / keep
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9", "--keep", keep]
    run([*argv, "--method", "components"])
    representatives = [
        r["id"] for r in pq.read_table(out / "groups.parquet").to_pylist() if r["is_representative"]
    ]
    assert representatives[0] == kept


def test_empty_pairs_keep_everything_and_still_report(tmp_path):
    ids = [f"x{i}" for i in range(5)]
    emb = write_embeddings(tmp_path / "emb", ids)
    pairs = write_pairs(tmp_path / "pairs", emb, [])
    out = tmp_path / "dedup"
    summary = run(["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"])
    assert (summary.groups, summary.kept, summary.removed) == (0, 5, 0)
    assert pq.read_table(out / "groups.parquet").num_rows == 0
    assert read_id_list(str(out / "kept_ids.txt")) == ids
    assert read_id_list(str(out / "removed_ids.txt")) == []
    assert "No duplicate groups" in (out / "report.html").read_text()


def test_dry_run_prints_the_sweep_and_writes_nothing(small, capsys):
    root, pairs = small
    out = root / "never"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.905", "--dry-run"]
    assert cli_main(["dedup", *argv, "--method", "components"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert not out.exists()
    # The chosen method's table ends at a blank line (every method's table follows).
    rows = {line.split()[0]: line.split() for line in printed[1 : printed.index("")]}
    assert len(rows) == 21  # 0.80 .. 0.99 and 0.905
    assert rows["0.905"][3] == "4" and rows["0.905"][-1] == "<"
    assert rows["0.8"][3] == "5" and rows["0.96"][3] == "2"
    assert "would be removed" in printed[-1]


def test_ids_without_pairs_count_as_kept_and_ids_are_escaped(tmp_path):
    ids = ["p\nq", "p\\q", "r", "s"]
    emb = write_embeddings(tmp_path / "emb", ids)
    pairs = write_pairs(tmp_path / "pairs", emb, [("p\nq", "p\\q", 0.99)])
    out = tmp_path / "dedup"
    run(["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"])
    # In id order "p\nq" comes first (LF sorts before the backslash) and is kept.
    assert read_id_list(str(out / "kept_ids.txt")) == ["p\nq", "r", "s"]
    assert (out / "kept_ids.txt").read_text() == "p\\nq\nr\ns\n"
    assert read_id_list(str(out / "removed_ids.txt")) == ["p\\q"]
    assert (out / "removed_ids.txt").read_text() == "p\\\\q\n"


def test_below_the_pairs_threshold_uses_neighbor_lists_with_a_warning(tmp_path, caplog):
    ids = ["a", "b", "c", "d"]
    emb = write_embeddings(tmp_path / "emb", ids)
    neighbors = {
        "a": [("b", 0.95), ("c", 0.75)],
        "b": [("a", 0.95), ("c", 0.7)],
        "c": [("a", 0.75), ("b", 0.7)],
        "d": [("c", 0.5), ("a", 0.4)],
    }
    pairs = write_pairs(
        tmp_path / "pairs", emb, [("a", "b", 0.95)], threshold=0.9, neighbors=neighbors, k=2
    )
    out = tmp_path / "dedup"
    summary = run(["--pairs", str(pairs), "--output", str(out), "--threshold", "0.72"])
    # a-b from pairs/, a-c (0.75) from the lists; b-c (0.7) is under the threshold.
    assert (summary.groups, summary.removed) == (1, 2)
    manifest = manifest_of(out)
    assert manifest["pairs"]["source"] == "pairs+neighbors"
    assert manifest["pairs"]["limited_by_k"] is True
    assert any("top-2 neighbour lists" in record.message for record in caplog.records)
    limited = {p["threshold"]: p["limited_by_k"] for p in manifest["sweep"]}
    assert limited[0.72] and not limited[0.95]


def test_threshold_below_the_pairs_without_neighbors_is_refused(small):
    root, pairs = small
    with pytest.raises(ValueError, match=r"hold only scores >= 0\.8.*rerun sbert pairs"):
        run(["--pairs", str(pairs), "--output", str(root / "o"), "--threshold", "0.7"])
    assert not (root / "o").exists()


def test_sweep_starts_at_the_pairs_threshold(small):
    _, pairs = small
    run_argv = ["--pairs", str(pairs), "--threshold", "0.9", "--dry-run", "--sweep-from", "0.5"]
    summary = run(run_argv)
    assert summary.sweep[0].threshold == 0.8
    assert any("the sweep starts at 0.8" in note for note in summary.notes)


@pytest.mark.parametrize(
    ("argv", "error", "match"),
    [
        (["--threshold", "1.5"], ValueError, r"in \[-1, 1\]"),
        (["--threshold", "-1.01"], ValueError, r"in \[-1, 1\]"),
        (["--threshold", "0.9", "--apply"], ValueError, "needs --corpus"),
        (["--threshold", "0.9", "--dry-run", "--apply"], ValueError, "writes nothing"),
        (
            ["--threshold", "0.9", "--method", "components", "--keep", "longest"],
            ValueError,
            "--keep-text",
        ),
    ],
)
def test_bad_options(tmp_path, argv, error, match):
    emb = write_embeddings(tmp_path / "emb", ["a", "b"])
    pairs = write_pairs(tmp_path / "pairs", emb, [("a", "b", 0.9)])
    with pytest.raises(error, match=match):
        run(["--pairs", str(pairs), "--output", str(tmp_path / "out"), *argv])
    assert not (tmp_path / "out").exists()


def test_bad_pairs_inputs(tmp_path):
    out = ["--output", str(tmp_path / "out"), "--threshold", "0.9"]
    with pytest.raises(FileNotFoundError, match=r"has no _manifest\.json"):
        run(["--pairs", str(tmp_path / "missing"), *out])
    emb = write_embeddings(tmp_path / "emb", ["a", "b"])
    unknown = write_pairs(tmp_path / "unknown", emb, [("a", "zz", 0.95)])
    with pytest.raises(ValueError, match="not among the 2 embedded ids"):
        run(["--pairs", str(unknown), *out])
    counted = write_pairs(tmp_path / "counted", emb, [], counts={"items": 3})
    with pytest.raises(ValueError, match="computed over 3"):
        run(["--pairs", str(counted), *out])
    other = write_embeddings(tmp_path / "other", ["a", "b"], dim=8)
    with pytest.raises(IncompatibleEmbeddingsError, match="dim"):
        run(["--pairs", str(counted), *out, "--embeddings", str(other)])
    gone = write_pairs(tmp_path / "gone", tmp_path / "emb", [])
    manifest = manifest_of(gone)
    manifest["embeddings"][0]["directory"] = str(tmp_path / "moved")
    (gone / "_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FileNotFoundError, match="pass --embeddings"):
        run(["--pairs", str(gone), *out])
    assert run(["--pairs", str(gone), *out, "--embeddings", str(emb)]).rows_in == 2
    not_pairs = tmp_path / "emb"
    with pytest.raises(ValueError, match="not the output of sbert pairs"):
        run(["--pairs", str(not_pairs), *out, "--overwrite"])


def test_existing_output_needs_overwrite(small):
    root, pairs = small
    argv = ["--pairs", str(pairs), "--output", str(root / "d"), "--threshold", "0.9"]
    run(argv)
    with pytest.raises(OutputExistsError):
        run(argv)
    assert run([*argv, "--overwrite"]).removed == 4


def test_cli_prints_one_line_errors(tmp_path, capsys):
    status = cli_main(["dedup", "--pairs", str(tmp_path / "nope"), "--threshold", "2"])
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[-1, 1]" in err[0]


# --- the corpus: order, texts and the deduplicated corpus --------------------------------------

FAMILY_TEXTS = [
    "alpha one",  # 0 ─┐
    "alpha one!",  # 1 ─┤ a group of three
    "beta two",  # 2 ─┼─ a group of two
    "gamma three",  # 3
    "ALPHA ONE",  # 4 ─┘
    'delta, with a comma and "quotes"',  # 5: rejected by the embed stage
    "beta two.",  # 6 ─┘
]


def _records(pattern_dir: Path, spec: CorpusSpec) -> list[CorpusRecord]:
    out = []
    for path in sorted(p for p in pattern_dir.iterdir() if p.is_file()):
        with open_decompressed(str(path)) as stream:
            items = read_corpus_file(stream, str(path), spec, path.name)
            out.extend(item for item in items if isinstance(item, CorpusRecord))
    return out


@pytest.mark.parametrize(
    ("fmt", "gz"),
    [("jsonl", False), ("csv", True), ("tsv", False), ("txt", False), ("parquet", False)],
)
def test_apply_writes_the_kept_rows_in_the_corpus_format(tmp_path, fmt, gz):
    corpus = write_corpus(tmp_path / "in", fmt, FAMILY_TEXTS, gz=gz)
    pattern = str(tmp_path / "in" / "*")
    spec = CorpusSpec(id_field=None if fmt == "txt" else "id")
    ids = [record.id for record in _records(tmp_path / "in", spec)]
    embedded = [item for i, item in enumerate(ids) if i != 5]
    rng = random.Random(0)
    shuffled = rng.sample(embedded, len(embedded))  # the embed job's row order is not the corpus's
    input_spec = {"pattern": pattern, "id_field": spec.id_field, "text_field": "text"}
    emb = write_embeddings(tmp_path / "emb", shuffled, input_spec=input_spec, rejected=(ids[5],))
    family = [(ids[0], ids[1], 0.97), (ids[1], ids[4], 0.95), (ids[2], ids[6], 0.93)]
    pairs = write_pairs(tmp_path / "pairs", emb, [*family, (ids[3], ids[6], 0.5)], threshold=0.5)
    out = tmp_path / "dedup"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"]
    summary = run(
        [*argv, "--corpus", pattern, "--apply", "--method", "components", "--keep", "longest"]
    )
    assert (summary.rows_in, summary.kept, summary.removed) == (6, 3, 3)
    written = out / "corpus" / corpus.name
    assert written.exists()
    kept = [record.text for record in _records(out / "corpus", spec)]
    # longest: "alpha one!" (ties to the first in corpus order would be "alpha one").
    assert kept == ["alpha one!", "gamma three", "beta two."]
    if fmt == "jsonl":
        lines = corpus.read_text().splitlines(keepends=True)
        assert written.read_text() == lines[1] + lines[3] + lines[6]
    if gz:
        with gzip.open(written) as handle:
            assert handle.read()  # still gzip
    rejected = pq.read_table(out / "corpus_rejected.parquet")
    assert rejected.schema == ERRORS_SCHEMA
    assert rejected.column("id").to_pylist() == [ids[5]]
    assert "rejected by the embed stage" in rejected.column("reason")[0].as_py()
    manifest = manifest_of(out)
    assert manifest["corpus"]["rows_read"] == 7
    assert manifest["corpus"]["written"] + manifest["corpus"]["removed"] == 6
    assert manifest["corpus"]["not_embedded"] == 1
    assert manifest["first_order"] == "corpus order (file, then row)"
    # "first" in corpus order, though the embeddings' rows are shuffled (--stable-keep off:
    # else the rows the longest run kept would stay kept).
    argv += ["--overwrite", "--stable-keep", "off"]
    run([*argv, "--corpus", pattern, "--apply", "--method", "components", "--keep", "first"])
    assert [record.text for record in _records(out / "corpus", spec)] == [
        "alpha one",
        "beta two",
        "gamma three",
    ]


def test_apply_reports_bad_and_duplicate_rows_separately(tmp_path):
    (tmp_path / "in").mkdir()
    lines = [
        '{"id": "a", "text": "same question"}',
        "{not json",
        '{"id": "b", "text": "same question?"}',
        '{"id": "a", "text": "a later row with a seen id"}',
        '{"id": "c", "text": ""}',
        '{"id": "d", "text": "other"}',
    ]
    (tmp_path / "in" / "q.jsonl").write_text("\n".join(lines) + "\n")
    pattern = str(tmp_path / "in" / "*.jsonl")
    emb = write_embeddings(
        tmp_path / "emb", ["d", "b", "a"], input_spec={"pattern": pattern, "id_field": "id"}
    )
    pairs = write_pairs(tmp_path / "pairs", emb, [("a", "b", 0.96)])
    out = tmp_path / "dedup"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"]
    run([*argv, "--corpus", pattern, "--apply"])
    assert (out / "corpus" / "q.jsonl").read_text() == lines[0] + "\n" + lines[5] + "\n"
    rejected = pq.read_table(out / "corpus_rejected.parquet").to_pylist()
    reasons = {row["source"].rsplit(":", 1)[1]: row["reason"] for row in rejected}
    assert set(reasons) == {"2", "4", "5"}
    assert reasons["2"].startswith("malformed JSON")
    assert reasons["4"].startswith("duplicate id (first seen at") and reasons["4"].endswith(":1)")
    assert reasons["5"] == "empty text"
    corpus = manifest_of(out)["corpus"]
    assert (corpus["rows_read"], corpus["written"], corpus["removed"], corpus["not_embedded"]) == (
        6,
        2,
        1,
        3,
    )


def test_corpus_that_does_not_match_the_embeddings_is_refused(tmp_path):
    write_corpus(tmp_path / "in", "jsonl", ["one", "two", "three"])
    pattern = str(tmp_path / "in" / "*")
    emb = write_embeddings(
        tmp_path / "emb", ["t0", "t1", "x9"], input_spec={"pattern": pattern, "id_field": "id"}
    )
    pairs = write_pairs(tmp_path / "pairs", emb, [("t0", "t1", 0.99)])
    argv = ["--pairs", str(pairs), "--output", str(tmp_path / "out"), "--threshold", "0.9"]
    with pytest.raises(ValueError, match=r"1 of the 3 embedded ids are not in the corpus.*'x9'"):
        run([*argv, "--corpus", pattern, "--apply"])
    with pytest.raises(ValueError, match="neither embedded nor rejected"):
        emb2 = write_embeddings(
            tmp_path / "emb2", ["t0", "t1"], input_spec={"pattern": pattern, "id_field": "id"}
        )
        run([*argv, "--corpus", pattern, "--embeddings", str(emb2)])
    with pytest.raises(FileNotFoundError, match="no input files match"):
        run([*argv, "--corpus", str(tmp_path / "nothing*")])
    assert not (tmp_path / "out").exists()


def test_derived_ids_give_the_corpus_order_without_the_corpus(tmp_path):
    ids = ["c.txt:10", "c.txt:9", "b.txt:1"]
    emb = write_embeddings(tmp_path / "emb", ids, input_spec={"pattern": "x/*", "id_field": None})
    pairs = write_pairs(tmp_path / "pairs", emb, [("c.txt:10", "c.txt:9", 0.99)])
    out = tmp_path / "out"
    run(["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"])
    assert read_id_list(str(out / "removed_ids.txt")) == ["c.txt:10"]
    assert read_id_list(str(out / "kept_ids.txt")) == ["b.txt:1", "c.txt:9"]
    assert "derived" in manifest_of(out)["first_order"]


# --- planted near-duplicates, real model ------------------------------------------------------


def _perturb(text: str, kind: str, rng: random.Random) -> str:
    """A near-duplicate: a word dropped, two words swapped, case changed, or punctuation."""
    words = text.split()
    if kind == "drop":
        del words[rng.randrange(1, len(words))]
    elif kind == "swap":
        i = rng.randrange(1, len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    elif kind == "case":
        return text.upper() if rng.random() < 0.5 else text.lower()
    else:
        return text.rstrip(".!?;") + rng.choice(["?", "!", " ...", ";"])
    return " ".join(words)


def planted_corpus(n_background: int = 150, n_groups: int = 25, seed: int = 7):
    """Background texts from the shared corpus plus groups of an original and 1-3 variants."""
    rng = random.Random(seed)
    texts = [row["text"] for row in read_tsv(DATA_DIR / "corpus" / "short_texts_en.tsv.gz")]
    long_enough = [t for t in texts if 8 <= len(t.split()) <= 25]
    chosen = rng.sample(long_enough, n_background + n_groups)
    records, groups = [], []
    for i, text in enumerate(chosen[:n_background]):
        records.append({"id": f"bg{i:04d}", "text": text})
    for g, original in enumerate(chosen[n_background:]):
        members = [f"g{g:03d}-0"]
        records.append({"id": members[0], "text": original})
        variants = {original}
        for kind in rng.sample(["drop", "swap", "case", "punct"], rng.randint(1, 3)):
            variant = _perturb(original, kind, rng)
            if variant not in variants:
                variants.add(variant)
                members.append(f"g{g:03d}-{len(members)}")
                records.append({"id": members[-1], "text": variant})
        if len(members) > 1:  # a variant can equal the original (a lower-case text lowered)
            groups.append(members)
    rng.shuffle(records)
    return records, groups


@pytest.mark.slow
def test_planted_near_duplicates_are_found_with_the_real_model(tmp_path, local_pipeline):
    from tests.stage_commands import embed
    from tests.stage_commands import pairs as pairs_job

    records, planted = planted_corpus()
    (tmp_path / "in").mkdir()
    with (tmp_path / "in" / "questions.jsonl").open("w") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    pattern = str(tmp_path / "in" / "*.jsonl")
    embed(
        ["--input", pattern, "--output", str(tmp_path / "emb"), "--id-field", "id"],
        test_pipeline=local_pipeline,
    )
    pairs_argv = ["--embeddings", str(tmp_path / "emb"), "--output", str(tmp_path / "pairs")]
    pairs_job([*pairs_argv, "--k", "5", "--threshold", "0.7", "--method", "exact"])
    out = tmp_path / "dedup"
    argv = ["--pairs", str(tmp_path / "pairs"), "--output", str(out), "--threshold", "0.75"]
    summary = run([*argv, "--corpus", pattern, "--apply"])
    assert summary.rows_in == len(records) == summary.kept + summary.removed
    group_of = {r["id"]: r["group"] for r in pq.read_table(out / "groups.parquet").to_pylist()}
    kept_ids = {record.id for record in _records(out / "corpus", CorpusSpec(id_field="id"))}
    assert kept_ids == set(read_id_list(str(out / "kept_ids.txt")))
    for members in planted:
        assert len({group_of.get(m) for m in members}) == 1, members  # all in one group
        assert group_of[members[0]] is not None
        assert len(kept_ids & set(members)) == 1, members  # exactly one row kept per group
    # Measured on this sample: the weakest link inside a planted group is 0.90, the most
    # similar unrelated texts reach 0.59 (0.81 and 0.61 with 240 + 30); nothing else merges.
    assert summary.removed == sum(len(members) - 1 for members in planted)
    assert summary.groups == len(planted)


# ----------------------------------------------------------------- methods and labelled pairs

# A chain p0 ~ p1 ~ p2 ~ p3 ~ p4 (0.95 each) with weaker skips (0.86); the pairs' floor is 0.8.
CHAIN = [
    *((f"p{i}", f"p{i + 1}", 0.95) for i in range(4)),
    *((f"p{i}", f"p{i + 2}", 0.86) for i in range(3)),
]


@pytest.fixture
def chain(tmp_path):
    ids = [f"p{i}" for i in range(5)] + ["q"]
    emb = write_embeddings(tmp_path / "emb", ids)
    return tmp_path, write_pairs(tmp_path / "pairs", emb, CHAIN)


@pytest.mark.parametrize("method", ["components", "ranked", "star", "split", "mutual", "average"])
def test_every_method_is_selectable_and_reports_its_largest_group(chain, method):
    root, pairs = chain
    out = root / method
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"]
    summary = run([*argv, "--method", method])
    groups = pq.read_table(out / "groups.parquet").to_pylist()
    sizes = [row["size"] for row in groups]
    assert summary.method == method
    assert summary.largest == max(sizes, default=0)
    assert summary.rows_in == summary.kept + summary.removed == 6
    assert summary.removed == len(groups) - summary.groups
    assert len(read_id_list(str(out / "removed_ids.txt"))) == summary.removed
    manifest = manifest_of(out)
    assert manifest["method"] == method
    assert manifest["counts"]["largest_group"] == summary.largest
    assert manifest["counts"]["removed"] == summary.removed
    # Hand-checked at T = 0.9 (central ranking: p1, p2, p3 have the largest score sums, ties
    # to id order): components chain all five; ranked takes only pairs >= 0.9, so p3 is
    # kept (p2 is removed) and p4 joins p3; star at its default radius (T) is the same.
    expected = {"components": (5, 4), "star": (3, 3), "ranked": (3, 3)}
    if method in expected:
        assert (summary.largest, summary.removed) == expected[method]


def test_star_is_the_default_and_components_is_todays_grouping(chain):
    _, pairs = chain
    argv = ["--pairs", str(pairs), "--threshold", "0.9", "--dry-run"]
    star = run(argv)
    # The default radius is T: every removed row is >= T to its kept row (= ranked).
    assert (star.method, star.largest, star.radius, star.holds_threshold) == ("star", 3, 0.9, True)
    assert star.below_threshold == 0
    components = run([*argv, "--method", "components"])
    assert components.largest == 5 and not components.holds_threshold
    assert components.below_threshold == 2  # p3 and p4 are chained to p1
    assert "may remove rows below the threshold to their kept row" in components.line()
    # An explicit radius is kept as a gap below every sweep threshold, floored at the pairs';
    # one under T is the looser rule (p3 joins p1 at 0.86), and the summary says so.
    loose = run([*argv, "--radius", "0.8"])
    assert loose.radius == 0.8 and loose.largest == 4 and not loose.holds_threshold
    assert "(1 of 3 removed rows are below 0.9 or chained)" in loose.line()
    # --keep applies to every method; --rank and its value corpus are its old spellings.
    assert run([*argv, "--keep", "first"]).keep == run([*argv, "--rank", "corpus"]).keep == "first"


def test_sweep_covers_every_method_in_the_manifest_and_the_dry_run(chain, capsys):
    root, pairs = chain
    out = root / "out"
    run(["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9", "--sweep", "all"])
    manifest = manifest_of(out)
    methods = [entry["method"] for entry in manifest["methods"]]
    assert methods == ["star", "components", "ranked", "split", "mutual", "average"]
    for entry in manifest["methods"]:
        assert [p["threshold"] for p in entry["points"]] == [
            p["threshold"] for p in manifest["sweep"]
        ]
    by_method = {e["method"]: {p["threshold"]: p for p in e["points"]} for e in manifest["methods"]}
    assert by_method["components"][0.9]["largest"] == 5 and by_method["star"][0.9]["largest"] == 3
    assert by_method["ranked"][0.9]["removed"] == 3
    assert manifest["sweep"] == [
        {k: v for k, v in p.items() if k in manifest["sweep"][0]}
        for p in manifest["methods"][0]["points"]
    ]
    page = (out / "report.html").read_text()
    assert "Every method" in page and "average" in page
    dry = ["dedup", "--pairs", str(pairs), "--threshold", "0.9", "--dry-run", "--sweep", "all"]
    assert cli_main(dry) == 0
    printed = capsys.readouterr().out.splitlines()
    table = printed[printed.index("") + 1 :]
    assert table[0].startswith("every method")
    assert table[1].split() == [
        "threshold",
        "star",
        "components",
        "ranked",
        "split",
        "mutual",
        "average",
    ]
    row = next(line.split() for line in table if line.split()[:1] == ["0.9"])
    assert row[1:4] == ["3/3", "4/5", "3/3"] and row[-1] == "<"


LABELS = [  # at T = 0.9 the groups are {a1, a2, a3}, {b1, b2}, {c1, c2}
    ("a1", "a3", 1),  # same group: TP
    ("a1", "a2", 1),  # TP
    ("b1", "b2", 0),  # same group, not duplicates: FP
    ("c1", "lone", 1),  # apart: FN
    ("lone", "lone2", 0),  # apart: TN
    ("c1", "c2", 1),  # TP
]


def write_labels(path: Path, rows, header=("qid1", "qid2", "is_duplicate")) -> Path:
    path.write_text(
        "\t".join(header) + "\n" + "".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows),
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("method", ["components", "star"])
def test_labels_give_hand_checked_precision_recall_and_calibrated_thresholds(small, method):
    root, pairs = small
    labels = write_labels(root / "labels.tsv", LABELS)
    out = root / "labelled"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9", "--method", method]
    summary = run([*argv, "--labels", str(labels), "--target-precision", "1"])
    point = summary.at_threshold()
    assert (point.counts.tp, point.counts.fp, point.counts.fn, point.counts.tn) == (3, 1, 1, 1)
    assert point.precision == point.recall == point.f1 == 0.75
    labelled = manifest_of(out)["labels"]
    assert labelled["read"] == labelled["evaluated"] == 6 and labelled["duplicates"] == 4
    assert labelled["method"] == method
    assert labelled["at_threshold"]["f1"] == 0.75
    # F1 0.75 from 0.80 to 0.91 (a2-a3 is 0.91); of equal F1 the higher threshold wins.
    assert (labelled["best_f1"]["threshold"], labelled["best_f1"]["f1"]) == (0.91, 0.75)
    # Precision 1 from 0.96 (b1-b2, 0.95, is out) with recall 2/4; ties to the higher: 0.97.
    reached = labelled["at_target_precision"]
    assert (reached["threshold"], reached["precision"], reached["recall"]) == (0.97, 1.0, 0.5)
    for entry in manifest_of(out)["methods"]:
        assert entry["best_f1"]["f1"] > 0 and "at_target_precision" in entry
        assert all({"precision", "recall", "f1"} <= set(p) for p in entry["points"])
    page = (out / "report.html").read_text()
    assert 'aria-label="precision-recall curve"' in page and "Against the labelled pairs" in page
    assert "labels: P 0.750 R 0.750 F1 0.750, best F1 0.750 at 0.91" in summary.line()
    assert "precision >= 1 at 0.97" in summary.line()


def test_labels_from_the_cli_with_other_column_names(small, capsys):
    root, pairs = small
    labels = write_labels(root / "labels.tsv", LABELS, header=("left", "right", "dup"))
    argv = ["dedup", "--pairs", str(pairs), "--threshold", "0.9", "--dry-run", "--sweep", "all"]
    argv.append("--labels")
    columns = ["--label-id-a", "left", "--label-id-b", "right", "--label-column", "dup"]
    assert cli_main([*argv, str(labels), *columns]) == 0
    printed = capsys.readouterr().out
    assert "star: best F1 0.750 at 0.91" in printed and "components: best F1 0.750" in printed


@pytest.mark.parametrize(
    ("rows", "extra", "match"),
    [
        ([*LABELS, ("a1", "nobody", 1)], [], r"1 of 7 labelled pairs name ids .*'nobody' in row 7"),
        ([*LABELS, ("a1", "a2", "maybe")], [], r"row 7, column 'is_duplicate': expected a 0/1"),
        ([("a1", "a2", 0), ("b1", "b2", 0)], [], "none of the 2 usable labelled pairs"),
        (LABELS, ["--label-column", "label"], r"missing column\(s\) 'label' \(the file has"),
    ],
)
def test_bad_labels_are_refused_before_anything_is_written(small, rows, extra, match):
    root, pairs = small
    labels = write_labels(root / "labels.tsv", rows)
    out = root / "never"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9"]
    with pytest.raises(ValueError, match=match):
        run([*argv, "--labels", str(labels), *extra])
    assert not out.exists()


def test_unknown_label_ids_can_be_skipped_and_are_counted(small):
    root, pairs = small
    labels = write_labels(root / "labels.tsv", [*LABELS, ("a1", "nobody", 1)])
    argv = ["--pairs", str(pairs), "--output", str(root / "o"), "--threshold", "0.9"]
    run([*argv, "--labels", str(labels), "--skip-unknown-labels"])
    labelled = manifest_of(root / "o")["labels"]
    assert (labelled["read"], labelled["evaluated"], labelled["unknown_ids"]) == (7, 6, 1)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--radius", "0.7"], r"--radius 0.7 is below the pairs' threshold 0.8"),
        (["--radius", "0.95"], r"--radius: must not exceed --threshold 0.9"),
        (["--method", "components", "--radius", "0.85"], "--radius: is for --method star or split"),
        (["--keep", "tallest"], "--keep: must be one of"),
        (["--rank", "tallest"], "--keep: must be one of"),
        (["--keep", "column:"], "--keep: must be one of"),
        (["--keep", "column:year"], "reads the field from the corpus"),
        (["--target-precision", "0.9"], "pass --labels"),
        (["--labels", "/nonexistent/labels.tsv"], "no such file"),
        (["--mutual-k", "0"], "--mutual-k: must be at least 1"),
        (["--missing-score", "0.85"], "above the lowest sweep threshold 0.8"),
    ],
)
def test_bad_method_options_are_refused(small, argv, match):
    root, pairs = small
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        run(["--pairs", str(pairs), "--output", str(root / "o"), "--threshold", "0.9", *argv])
    assert not (root / "o").exists()


def test_rank_by_a_corpus_column_keeps_the_largest_value(tmp_path):
    records = [{"id": "x", "text": "one", "votes": "3"}, {"id": "y", "text": "two", "votes": "9"}]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    spec = {"pattern": str(corpus), "id_field": "id", "text_field": "text"}
    emb = write_embeddings(tmp_path / "emb", ["x", "y"], input_spec=spec)
    pairs = write_pairs(tmp_path / "pairs", emb, [("x", "y", 0.97)])
    out = tmp_path / "dedup"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9", "--corpus"]
    run([*argv, str(corpus), "--rank", "column:votes"])
    assert read_id_list(str(out / "kept_ids.txt")) == ["y"]
    run([*argv, str(corpus), "--rank", "corpus", "--overwrite", "--stable-keep", "off"])
    assert read_id_list(str(out / "kept_ids.txt")) == ["x"]
    # --stable-keep on: x stays kept whatever the keep rule says.
    run([*argv, str(corpus), "--rank", "column:votes", "--overwrite", "--stable-keep", "on"])
    assert read_id_list(str(out / "kept_ids.txt")) == ["x"]


@pytest.mark.parametrize("method", ["components", "star", "ranked"])
def test_keep_by_a_corpus_column_with_every_method(tmp_path, method):
    records = [
        {"id": "x", "text": "one", "votes": "3"},
        {"id": "y", "text": "two", "votes": "9"},
        {"id": "z", "text": "three", "votes": "5"},
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    spec = {"pattern": str(corpus), "id_field": "id", "text_field": "text"}
    emb = write_embeddings(tmp_path / "emb", ["x", "y", "z"], input_spec=spec)
    pairs = write_pairs(tmp_path / "pairs", emb, [("x", "y", 0.97), ("x", "z", 0.96)])
    out = tmp_path / "dedup"
    argv = ["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9", "--corpus"]
    summary = run([*argv, str(corpus), "--method", method, "--keep", "column:votes"])
    assert summary.keep == "column:votes" and "keep column:votes" in summary.line()
    # y (9 votes) is kept; components remove both others, while star and ranked keep z too:
    # z (5 votes) comes before x, and its pair with y is not similar.
    expected = ["y"] if method == "components" else ["y", "z"]
    assert read_id_list(str(out / "kept_ids.txt")) == expected
    manifest = manifest_of(out)
    assert manifest["keep"] == "column:votes"
    assert manifest["settings"]["sweep_keep"] == "column:votes"
    assert "rank" not in manifest["settings"]
    # The old spelling gives the same output.
    run([*argv, str(corpus), "--method", method, "--rank", "column:votes", "--overwrite"])
    assert manifest_of(out)["keep"] == "column:votes"
    assert read_id_list(str(out / "kept_ids.txt"))[0] == "y"


def test_components_keep_random_repeats_with_the_seed(chain):
    root, pairs = chain
    argv = ["--pairs", str(pairs), "--threshold", "0.9", "--method", "components"]
    kept = []
    for folder in ("a", "b"):
        out = root / folder
        summary = run([*argv, "--output", str(out), "--keep", "random", "--seed", "1"])
        kept.append(read_id_list(str(out / "kept_ids.txt")))
        assert manifest_of(out)["keep"] == summary.keep == "random"
    assert kept[0] == kept[1] and len(kept[0]) == summary.kept


def test_rank_longest_keeps_the_longest_text_of_a_star(small):
    root, pairs = small
    out = root / "longest"
    run(["--pairs", str(pairs), "--output", str(out), "--threshold", "0.9", "--rank", "longest"])
    rows = pq.read_table(out / "groups.parquet").to_pylist()
    group = next(r["group"] for r in rows if r["id"] == "a1")
    first = [(r["id"], r["is_representative"], r["score"]) for r in rows if r["group"] == group]
    # a3 is the longest and kept first, but a1 is 0.88 to it (under T), so a1 is kept too;
    # a2 joins the most similar of the two, a1 (0.97; central would have kept a2).
    assert first == [("a1", True, None), ("a2", False, pytest.approx(0.97))]
    assert "a3" in read_id_list(str(out / "kept_ids.txt"))
    assert manifest_of(out)["keep"] == "longest" and manifest_of(out)["settings"]["radius"] == 0.9


def test_run_config_dedup_keys_become_the_commands_options(tmp_path, tiny_st_dir):
    from sbert_pipeline.jobs.run_config import load_run_config
    from sbert_pipeline.jobs.run_inputs import check_job_inputs
    from sbert_pipeline.jobs.run_stages import plan_stages

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}\n', encoding="utf-8")
    labels = write_labels(tmp_path / "labels.tsv", [("a", "b", 1)], header=("x", "y", "dup"))
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput: {{path: {corpus}, id_field: id}}\n"
        f"model: {tiny_st_dir}\ncluster: {{k: 2}}\n"
        f"dedup: {{threshold: 0.9, method: split, rank: longest, radius: 0.85, labels: {labels}, "
        "target_precision: 0.9, options: {label-id-a: x, label-id-b: y, label-column: dup}}\n",
        encoding="utf-8",
    )
    loaded = load_run_config(config)
    plan = {p.name: p for p in plan_stages(loaded, check_job_inputs(loaded), [])}["dedup"]
    args = plan.options  # the old rank key is read as keep
    assert (args.method, args.keep, args.radius, args.labels) == (
        "split",
        "longest",
        0.85,
        str(labels),
    )
    assert (args.target_precision, args.label_id_a, args.label_id_b, args.label_column) == (
        0.9,
        "x",
        "y",
        "dup",
    )


def test_run_config_dedup_against_and_stable_keep_become_the_commands_options(
    tmp_path, tiny_st_dir
):
    from sbert_pipeline.jobs.run_config import load_run_config
    from sbert_pipeline.jobs.run_inputs import check_job_inputs
    from sbert_pipeline.jobs.run_stages import plan_stages

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}\n', encoding="utf-8")
    reference = write_embeddings(tmp_path / "reference-embeddings", ["r1", "r2"])
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput: {{path: {corpus}, id_field: id}}\n"
        f"model: {tiny_st_dir}\ncluster: {{k: 2}}\n"
        f"dedup: {{threshold: 0.9, against: {reference}, stable_keep: 'off'}}\n",
        encoding="utf-8",
    )
    loaded = load_run_config(config)
    plan = {p.name: p for p in plan_stages(loaded, check_job_inputs(loaded), [])}["dedup"]
    assert plan.options.against == (str(reference),)
    assert plan.options.stable_keep is False  # the old value "off", converted
    assert plan.options.pairs == str(tmp_path / "job" / "pairs")  # the job's embeddings: corpus
    # The reference's content is in dedup's fingerprint: embedded again, it reruns dedup.
    before = plan.fingerprint({"pairs": "p"})
    assert plan.inputs["against"][0]["directory"] == str(reference)
    manifest = reference / "_manifest.json"
    manifest.write_text(manifest.read_text() + " ", encoding="utf-8")  # new bytes
    again = {p.name: p for p in plan_stages(loaded, check_job_inputs(loaded), [])}["dedup"]
    assert again.fingerprint({"pairs": "p"}) != before


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("dedup.radius=0.7", r"dedup.radius: 0.7 is below pairs.threshold 0.8"),
        ("dedup.radius=.nan", r"dedup.radius: must be in"),
        ("dedup.target_precision=1.5", r"dedup.target_precision: must be in \[0, 1\]"),
    ],
)
def test_run_config_dedup_ranges_are_checked_when_loaded(tmp_path, override, match):
    from sbert_pipeline.jobs.run_config import load_run_config

    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput: {{path: {tmp_path / 'c.jsonl'}}}\n"
        "cluster: {k: 3}\npairs: {threshold: 0.8}\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=match):
        load_run_config(config, [override])
