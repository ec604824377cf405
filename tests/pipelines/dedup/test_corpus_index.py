"""The corpus index: a dedup run over unchanged corpus files takes their rows from the previous
version's ``corpus_index.parquet`` instead of parsing them, with the same result."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.dedup.corpus import scan_corpus
from sbert_pipeline.dedup.versions import INDEX_FILE, embedded_texts, previous_index
from sbert_pipeline.io.corpus_files import open_decompressed
from sbert_pipeline.io.corpus_reader import CorpusRecord, CorpusSpec, read_corpus_file
from sbert_pipeline.io.embeddings import EmbeddingsDataset

from tests.jobs.test_dedup_job import write_embeddings, write_pairs
from tests.stage_commands import dedup as run

SPEC = CorpusSpec(id_field="id")


def _write(path: Path, rows: list[str]) -> None:
    path.write_text("".join(row + "\n" for row in rows))


def _corpus(folder: Path) -> None:
    """Three files: a malformed row, a repeated id and a row the embed stage rejected among
    them."""
    folder.mkdir()
    _write(
        folder / "a.jsonl", [json.dumps({"id": f"a{i}", "text": f"alpha {i}"}) for i in range(6)]
    )
    _write(
        folder / "b.jsonl",
        [
            json.dumps({"id": "b0", "text": "beta zero"}),
            "{not json",
            json.dumps({"id": "a1", "text": "a repeated id"}),
            json.dumps({"id": "b1", "text": "beta one"}),
            json.dumps({"id": "bad", "text": "rejected by the embed stage"}),
        ],
    )
    _write(
        folder / "c.jsonl", [json.dumps({"id": f"c{i}", "text": f"gamma {i}"}) for i in range(4)]
    )


def _texts(folder: Path) -> dict[str, str]:
    """``{id: text}`` of every record, first row of an id wins (as the embed stage keeps it)."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.jsonl")):
        with open_decompressed(str(path)) as stream:
            for item in read_corpus_file(stream, str(path), SPEC, path.name):
                if isinstance(item, CorpusRecord):
                    out.setdefault(item.id, item.text)
    return out


def _embed(tmp_path: Path, name: str, folder: Path, *, keep_text: bool = True) -> Path:
    """Embeddings of the corpus (rows shuffled, as an embed job writes them)."""
    texts = _texts(folder)
    ids = [item for item in texts if item != "bad"]
    ids = [ids[i] for i in np.random.default_rng(1).permutation(len(ids))]
    spec = {"pattern": str(folder / "*.jsonl"), "id_field": "id", "text_field": "text"}
    return write_embeddings(
        tmp_path / name,
        ids,
        texts=[texts[item] for item in ids] if keep_text else None,
        input_spec=spec,
        rejected=("bad",),
    )


def _dedup(tmp_path: Path, emb: Path, out: Path, *extra: str):
    ids = pq.read_table(emb, columns=["id"]).column("id").to_pylist()
    pairs = [("a0", "a1", 0.97), ("a1", "c2", 0.95), ("b0", "b1", 0.93)]
    pairs += [(ids[0], ids[-1], 0.5)]
    found = tmp_path / f"pairs-{emb.name}"
    if not found.exists():
        found = write_pairs(found, emb, pairs, threshold=0.5)
    pattern = str(tmp_path / "corpus" / "*.jsonl")
    argv = ["--pairs", str(found), "--output", str(out), "--threshold", "0.9", "--corpus", pattern]
    return run([*argv, "--method", "components", "--keep", "first", *extra])


def _manifest(out: Path) -> dict:
    return json.loads((out / "_manifest.json").read_text())


def _scan(tmp_path: Path, emb: Path, **kwargs):
    ids, _ = EmbeddingsDataset.open(str(emb)).load()
    index = {item: row for row, item in enumerate(ids)}
    wanted = np.zeros(len(ids), bool)
    wanted[::2] = True  # every other row's text
    return scan_corpus(
        str(tmp_path / "corpus" / "*.jsonl"), SPEC, index, wanted, lambda: {"bad"}, **kwargs
    )


def _same_scan(found, expected) -> None:
    assert np.array_equal(found.positions, expected.positions)
    assert found.texts == expected.texts
    assert (found.rows, found.not_embedded) == (expected.rows, expected.not_embedded)
    assert found.digests == expected.digests
    for mine, theirs in zip(found.file_rows, expected.file_rows, strict=True):
        assert (mine.rows, mine.ids) == (theirs.rows, theirs.ids)
        assert np.array_equal(mine.numbers, theirs.numbers)


@pytest.fixture
def first_run(tmp_path):
    """A dedup of the three files with --corpus: every file parsed, the index written."""
    _corpus(tmp_path / "corpus")
    emb = _embed(tmp_path, "emb1", tmp_path / "corpus")
    out = tmp_path / "dedup"
    _dedup(tmp_path, emb, out, "--apply")
    index = _manifest(out)["corpus"]["index"]
    assert (index["reused"], index["parsed"]) == (0, 3)
    assert [(f["rows"], f["records"]) for f in index["files"]] == [(6, 6), (5, 4), (4, 4)]
    assert (out / INDEX_FILE).exists()
    return tmp_path, emb, out


def test_a_rerun_reuses_every_file_with_the_same_output(first_run):
    tmp_path, emb, out = first_run
    before = {name: (out / name).read_bytes() for name in ("groups.parquet", "kept_ids.txt")}
    corpus_before = _manifest(out)["corpus"]
    _dedup(tmp_path, emb, out, "--apply", "--overwrite", "--no-stable-keep")
    manifest = _manifest(out)
    index = manifest["corpus"]["index"]
    assert (index["reused"], index["parsed"]) == (3, 0)
    assert index["texts_from_embeddings"] > 0
    assert manifest["first_order"] == "corpus order (file, then row)"
    for name, data in before.items():
        assert (out / name).read_bytes() == data, name
    for key in ("rows_read", "written", "removed", "not_embedded"):
        assert manifest["corpus"][key] == corpus_before[key], key
    assert manifest["texts"]["found"] == manifest["texts"]["grouped"] > 0


def test_new_and_changed_files_are_parsed_and_the_scan_equals_a_full_one(first_run):
    tmp_path, _, out = first_run
    corpus = tmp_path / "corpus"
    rows = (corpus / "c.jsonl").read_text().splitlines()
    rows[1] = json.dumps({"id": "c1", "text": "gamma one, reworded"})
    _write(corpus / "c.jsonl", rows)
    _write(corpus / "d.jsonl", [json.dumps({"id": "d0", "text": "delta zero"})])
    emb = _embed(tmp_path, "emb2", corpus)
    dataset = EmbeddingsDataset.open(str(emb))
    previous = previous_index(str(out), SPEC)
    assert len(previous) == 3
    found = _scan(tmp_path, emb, previous=previous, fetch_texts=embedded_texts([dataset], SPEC))
    assert found.counts["reused"] == 2 and found.counts["parsed"] == 2
    expected = _scan(tmp_path, emb)
    assert expected.counts["reused"] == 0
    _same_scan(found, expected)


def test_without_texts_in_the_embeddings_a_file_with_a_wanted_text_is_parsed(first_run):
    tmp_path, _, out = first_run
    emb = _embed(tmp_path, "plain", tmp_path / "corpus", keep_text=False)
    dataset = EmbeddingsDataset.open(str(emb))
    assert embedded_texts([dataset], SPEC) is None
    found = _scan(tmp_path, emb, previous=previous_index(str(out), SPEC))
    expected = _scan(tmp_path, emb)
    _same_scan(found, expected)
    assert found.counts["parsed"] == 3  # each file holds a wanted row


def test_a_damaged_or_foreign_index_is_not_used(first_run, caplog):
    tmp_path, emb, out = first_run
    other = CorpusSpec(id_field="id", text_field="question")
    assert previous_index(str(out), other) == {}  # read with another spec
    path = out / INDEX_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        assert previous_index(str(out), SPEC) == {}
    assert "is not used" in caplog.text and INDEX_FILE in caplog.text
    found = _scan(tmp_path, emb, previous=previous_index(str(out), SPEC))
    assert found.counts["parsed"] == 3


def test_a_ranking_column_reads_every_file(first_run):
    tmp_path, emb, _ = first_run
    corpus = tmp_path / "corpus"
    for path in corpus.glob("*.jsonl"):  # every record gets a votes field
        lines = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                lines.append(line)
                continue
            lines.append(json.dumps({**record, "votes": len(record["text"])}))
        _write(path, lines)
    out2 = tmp_path / "dedup2"
    _dedup(tmp_path, emb, out2)
    found = _scan(tmp_path, emb, previous=previous_index(str(out2), SPEC), value_field="votes")
    assert found.counts["reused"] == 0 and found.counts["parsed"] == 3
    assert np.isfinite(found.values).all()
