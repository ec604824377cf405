"""``sbert verify`` on pairs made from own vectors (``sbert pairs --embedding-field``): texts
from the dataset's recorded text column, or from ``--corpus`` read by ``--id-field``; and
``sbert dedup`` on the verified pairs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.io.pairs_output import read_pairs
from sbert_pipeline.jobs.stage_cli import run_command
from verify_data import PAIRS_THRESHOLD, TEXTS, local_runner, write_corpus

OWN = ["--embedding-column", "vec", "--id-column", "doc_id"]


def own_dataset(folder: Path, encoder) -> Path:
    """``TEXTS`` embedded by the tiny encoder, as a Parquet dataset of our own columns."""
    folder.mkdir()
    vectors = np.asarray(encoder.encode(TEXTS), np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
    ids = [f"doc-{i}" for i in range(len(TEXTS))]
    pq.write_table(pa.table({"doc_id": ids, "vec": column, "body": TEXTS}), folder / "v.parquet")
    return folder


def own_pairs(root: Path, data: Path, *columns: str) -> Path:
    out = root / "pairs"
    argv = ["--embeddings", str(data), *OWN, *columns, "--output", str(out), "--k", "3"]
    run_command("pairs", [*argv, "--threshold", str(PAIRS_THRESHOLD), "--method", "exact"])
    return out


def verify(pairs: Path, model: Path, out: Path, *extra: str):
    argv = ["--pairs", str(pairs), "--model", str(model), "--output", str(out), *extra]
    return run_command("verify", [*argv, "--device", "cpu"], pipeline=local_runner())


def expected_scores(model: Path, out: Path) -> tuple[np.ndarray, np.ndarray]:
    """The written scores, and the cross-encoder's on the texts of the same ids."""
    from sbert_core import CrossEncoder

    table = read_pairs(str(out))
    texts = dict(enumerate(TEXTS))
    pairs = [
        (texts[int(a[4:])], texts[int(b[4:])])
        for a, b in zip(table["id_a"].to_pylist(), table["id_b"].to_pylist(), strict=True)
    ]
    oracle = CrossEncoder.load(model, device="cpu").predict(pairs)
    return table["score"].to_numpy(), np.asarray(oracle, np.float32)


def test_pairs_of_own_vectors_are_verified_with_their_text_column_and_deduplicated(
    tmp_path, tiny_encoder, cross_encoder_dir
):
    data = own_dataset(tmp_path / "own", tiny_encoder)
    pairs = own_pairs(tmp_path, data, "--text-column", "body")
    out = tmp_path / "verified"
    result = verify(pairs, cross_encoder_dir, out)
    counts = result.manifest["verify"]["counts"]
    assert counts["scored"] == counts["read"] == counts["written"] > 0
    assert result.manifest["verify"]["texts"]["source"] == str(data)
    got, want = expected_scores(cross_encoder_dir, out)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # dedup reads the verified pairs of own vectors (their ids from the dataset).
    dedup = tmp_path / "dedup"
    argv = ["--pairs", str(out), "--output", str(dedup), "--threshold", "0.5"]
    summary = run_command("dedup", [*argv, "--method", "components"]).summary
    manifest = json.loads((dedup / "_manifest.json").read_text())
    assert manifest["counts"]["rows_in"] == len(TEXTS)
    assert summary.removed == manifest["counts"]["removed"]


def test_own_vectors_without_texts_take_them_from_a_corpus_by_its_id_field(
    tmp_path, tiny_encoder, cross_encoder_dir
):
    data = own_dataset(tmp_path / "own", tiny_encoder)
    pairs = own_pairs(tmp_path, data)
    out = tmp_path / "verified"
    with pytest.raises(ValueError, match=r"read without --text-field.*--corpus GLOB --id-field"):
        verify(pairs, cross_encoder_dir, out)
    corpus = write_corpus(tmp_path / "corpus.jsonl", TEXTS)
    with pytest.raises(ValueError, match=r"not computed from an sbert embed output.*--id-field"):
        verify(pairs, cross_encoder_dir, out, "--corpus", str(corpus))
    assert not out.exists()
    result = verify(pairs, cross_encoder_dir, out, "--corpus", str(corpus), "--id-field", "id")
    assert result.manifest["verify"]["texts"]["source"] == str(corpus)
    got, want = expected_scores(cross_encoder_dir, out)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
