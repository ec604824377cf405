"""Verify and dedup take texts and ids only from the version of the embeddings the pairs were
computed from: embeddings made again since (same ids, other texts) are refused, naming both
versions, for pairs written with the version digest and for older pairs without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sbert_pipeline.io.embeddings import SHOWN_DIGEST, version_digest
from sbert_pipeline.io.pairs_output import VERSION_DIGEST, PairsOutput, StaleEmbeddingsError
from sbert_pipeline.jobs.stage_cli import run_command
from verify_data import TEXTS, embed_and_pair, local_runner, write_corpus


def reembed_other_texts(root: Path, model: Path) -> dict:
    """The embeddings folder of ``root`` embedded again from another corpus with the same ids;
    its new manifest."""
    corpus = write_corpus(root / "other.jsonl", [f"another text {i}" for i in range(len(TEXTS))])
    argv = ["--input", str(corpus), "--output", str(root / "embeddings"), "--model", str(model)]
    argv += ["--id-field", "id", "--device", "cpu", "--keep-text", "--overwrite"]
    run_command("embed", argv, pipeline=local_runner())
    return json.loads((root / "embeddings" / "_manifest.json").read_text())


def drop_digests(pairs: Path) -> None:
    """The pairs manifest as versions before the digest wrote it."""
    path = pairs / "_manifest.json"
    manifest = json.loads(path.read_text())
    for entry in manifest["embeddings"]:
        del entry[VERSION_DIGEST]
    path.write_text(json.dumps(manifest))


def test_pairs_record_the_version_of_their_embeddings(pairs_dir):
    manifest = json.loads((pairs_dir / "_manifest.json").read_text())
    (entry,) = manifest["embeddings"]
    current = json.loads((Path(entry["directory"]) / "_manifest.json").read_text())
    assert entry[VERSION_DIGEST] == version_digest(current) == version_digest(entry["manifest"])
    # The version it names is the one there now: both readers open it.
    assert len(PairsOutput.open(str(pairs_dir)).open_embeddings(moved="x")) == 1


@pytest.mark.parametrize("recorded", ["digest", "manifest only"])
def test_verify_and_dedup_refuse_embeddings_made_again_since_the_pairs(
    tmp_path, tiny_st_dir, cross_encoder_dir, recorded
):
    pairs = embed_and_pair(tmp_path, tiny_st_dir)
    made = json.loads((pairs / "_manifest.json").read_text())["embeddings"][0]["manifest"]
    if recorded == "manifest only":
        drop_digests(pairs)
    now = reembed_other_texts(tmp_path, tiny_st_dir)
    both = [
        f"created {made['created']}, manifest digest {version_digest(made)[:SHOWN_DIGEST]}",
        f"created {now['created']}, manifest digest {version_digest(now)[:SHOWN_DIGEST]}",
    ]
    out = tmp_path / "verified"
    argv = ["--pairs", str(pairs), "--model", str(cross_encoder_dir), "--output", str(out)]
    with pytest.raises(StaleEmbeddingsError) as refused:
        run_command("verify", [*argv, "--device", "cpu"], pipeline=local_runner())
    message = str(refused.value)
    assert "another version of the embeddings" in message and "\n" not in message
    assert all(version in message for version in both), message
    assert not out.exists()
    dedup = tmp_path / "dedup"
    with pytest.raises(StaleEmbeddingsError, match="another version of the embeddings"):
        run_command("dedup", ["--pairs", str(pairs), "--output", str(dedup), "--threshold", "0.9"])
    assert not dedup.exists()


@pytest.mark.parametrize("change", ["same size", "longer"])
def test_a_corpus_file_changed_since_it_was_embedded_is_refused(
    tmp_path, tiny_st_dir, cross_encoder_dir, change
):
    """An incremental embed records each corpus file's bytes and sha256: --corpus refuses a
    file whose texts are no longer those embedded."""
    corpus = write_corpus(tmp_path / "corpus.jsonl", TEXTS)
    argv = ["--input", str(corpus), "--output", str(tmp_path / "embeddings"), "--incremental"]
    argv += ["--model", str(tiny_st_dir), "--id-field", "id", "--device", "cpu"]
    run_command("embed", argv)  # incremental: one pipeline per file, from its launcher
    pairs = tmp_path / "pairs"
    argv = ["--embeddings", str(tmp_path / "embeddings"), "--output", str(pairs), "--k", "3"]
    run_command("pairs", [*argv, "--threshold", "0.5", "--method", "exact"])
    out = tmp_path / "verified"
    verify = ["--pairs", str(pairs), "--model", str(cross_encoder_dir), "--output", str(out)]
    verify += ["--device", "cpu", "--corpus", str(corpus)]
    edited = [text.swapcase() if change == "same size" else text + "!" for text in TEXTS]
    write_corpus(corpus, edited)
    with pytest.raises(ValueError, match=rf"--corpus: {corpus} changed since the embeddings"):
        run_command("verify", verify, pipeline=local_runner())
    assert not out.exists()
    write_corpus(corpus, TEXTS)  # as embedded again: verified
    assert run_command("verify", verify, pipeline=local_runner()).manifest["verify"]["counts"]
