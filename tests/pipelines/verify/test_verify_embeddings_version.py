"""Verify and dedup take texts and ids only from the version of the embeddings the pairs were
computed from: embeddings made again since (same ids, other texts) are refused, naming both
versions, for pairs written with the version digest and for older pairs without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from verify_data import TEXTS, embed_and_pair, local_runner, write_corpus

from jobs.stage_cli import run_command
from pipelines.io.embeddings import SHOWN_DIGEST, version_digest
from pipelines.io.pairs_output import VERSION_DIGEST, PairsOutput, StaleEmbeddingsError


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
