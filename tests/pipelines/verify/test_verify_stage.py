"""``sbert verify`` end to end on tiny random models: the scores against sentence-transformers'
CrossEncoder (the oracle), the band's edges, the counts, texts from the corpus, refusals before
any output is touched, and ``sbert dedup`` reading the output unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.io.pairs_output import PairsOutput, read_pairs
from sbert_pipeline.jobs.stage_cli import run_command
from sbert_pipeline.stage_api.options import OptionError
from verify_data import TEXTS, build_cross_encoder, embed_and_pair, local_runner, write_corpus

from sbert_core.errors import ModelLoadError

TOL = 1e-5


def verify(argv: list[str]):
    """``sbert verify ARGV`` on the in-process runner; its Result."""
    return run_command("verify", [*argv, "--device", "cpu"], pipeline=local_runner())


def args(pairs, model, output, *extra: str) -> list[str]:
    """The command line of a verify run of ``pairs`` with ``model`` into ``output``."""
    return ["--pairs", str(pairs), "--model", str(model), "--output", str(output), *extra]


def texts_by_id() -> dict[str, str]:
    return {f"doc-{i}": text for i, text in enumerate(TEXTS)}


def st_scores(model: Path, pairs: list[tuple[str, str]]) -> np.ndarray:
    """sentence-transformers' CrossEncoder.predict on the same pairs (the oracle)."""
    from sentence_transformers import CrossEncoder as STCrossEncoder

    scores = STCrossEncoder(str(model), device="cpu").predict(pairs, batch_size=7)
    return np.asarray(scores, np.float32)


def verified_table(directory: Path):
    return pq.read_table(sorted((directory / "pairs").glob("part-*.parquet")))


@pytest.fixture(scope="module")
def verified(pairs_dir, cross_encoder_dir, tmp_path_factory):
    """The whole folder verified (no band)."""
    out = tmp_path_factory.mktemp("verified") / "out"
    return out, verify(args(pairs_dir, cross_encoder_dir, out))


def test_scores_are_the_cross_encoders_on_every_pair(verified, pairs_dir, cross_encoder_dir):
    out, _ = verified
    table = verified_table(out)
    candidates = read_pairs(str(pairs_dir))
    assert len(candidates) > 20  # the tiny model gives many pairs above 0.5
    # Rows in == rows out, each pair once with its cosine.
    got = {
        (a, b): (s, c)
        for a, b, s, c in zip(*(table[n].to_pylist() for n in table.column_names), strict=True)
    }
    want = dict(
        zip(
            zip(candidates["id_a"].to_pylist(), candidates["id_b"].to_pylist(), strict=True),
            candidates["score"].to_pylist(),
            strict=True,
        )
    )
    assert set(got) == set(want) and len(got) == len(table)
    assert all(got[key][1] == want[key] for key in want)
    texts = texts_by_id()
    keys = sorted(got)
    oracle = st_scores(cross_encoder_dir, [(texts[a], texts[b]) for a, b in keys])
    np.testing.assert_allclose([got[key][0] for key in keys], oracle, atol=TOL, rtol=0)
    assert np.ptp(oracle) > 0.05  # the scores spread, so a mix-up of pairs would show


def test_manifest_keeps_the_pairs_contract_and_records_the_verification(
    verified, pairs_dir, cross_encoder_dir
):
    out, result = verified
    manifest = json.loads((out / "_manifest.json").read_text())
    source = json.loads((pairs_dir / "_manifest.json").read_text())
    assert manifest["kind"] == "pairs" and manifest["threshold"] == -1.0
    for key in ("embeddings", "k", "method", "model_id", "weights_sha256"):
        assert manifest[key] == source[key], key
    assert manifest["counts"]["items"] == source["counts"]["items"] == len(TEXTS)
    section = manifest["verify"]
    n = source["counts"]["pairs"]
    assert section["counts"] == {
        "read": n,
        "scored": n,
        "above_band": 0,
        "below_band": 0,
        "written": n,
    }
    assert section["band"] is None and section["input"]["directory"] == str(pairs_dir)
    from sbert_core import CrossEncoder

    assert (
        section["model"]["identity"] == CrossEncoder.load(cross_encoder_dir, device="cpu").identity
    )
    assert section["pairs_per_second"] > 0 and section["seconds"] > 0
    # The movement summary, from the written columns.
    table = verified_table(out)
    cosine, score = (table[name].to_numpy().astype(np.float64) for name in ("cosine", "score"))
    moved = section["movement"]
    assert moved["up"] == int(((cosine < 0.5) & (score >= 0.5)).sum())
    assert moved["down"] == int(((cosine >= 0.5) & (score < 0.5)).sum())
    assert moved["mean_abs_change"] == pytest.approx(np.abs(score - cosine).mean(), abs=1e-6)
    assert f"verified {n} of {n} pairs" in result.line()
    # The neighbour lists are the input's, and PairsOutput reads the folder as verified.
    assert pq.read_table(out / "neighbors").num_rows == len(TEXTS)
    assert PairsOutput.open(str(out)).verified and not PairsOutput.open(str(pairs_dir)).verified


def test_band_edges_score_only_the_band(pairs_dir, cross_encoder_dir, verified, tmp_path):
    full = verified_table(verified[0])
    cosines = np.sort(full["cosine"].to_numpy())
    # Edges on actual cosines: a pair at LOW is scored, a pair at HIGH is not.
    low, high = float(cosines[len(cosines) // 4]), float(cosines[3 * len(cosines) // 4])
    out = tmp_path / "band"
    result = verify(args(pairs_dir, cross_encoder_dir, out, "--band", repr(low), repr(high)))
    table = verified_table(out)
    cosine, score = table["cosine"].to_numpy(), table["score"].to_numpy()
    full_score = dict(
        zip(
            zip(full["id_a"].to_pylist(), full["id_b"].to_pylist(), strict=True),
            full["score"].to_numpy(),
            strict=True,
        )
    )
    keys = list(zip(table["id_a"].to_pylist(), table["id_b"].to_pylist(), strict=True))
    above = cosine >= np.float32(high)
    below = cosine < np.float32(low)
    inside = ~above & ~below
    assert (cosine == np.float32(low)).any() and (cosine == np.float32(high)).any()
    assert (score[above] == 1.0).all() and (score[below] == 0.0).all()
    np.testing.assert_allclose(
        score[inside], [full_score[k] for k, i in zip(keys, inside, strict=True) if i], atol=TOL
    )
    counts = result.manifest["verify"]["counts"]
    assert counts == {
        "read": len(table),
        "scored": int(inside.sum()),
        "above_band": int(above.sum()),
        "below_band": int(below.sum()),
        "written": len(table),
    }
    assert counts["read"] == counts["scored"] + counts["above_band"] + counts["below_band"]
    assert result.manifest["verify"]["band"] == [low, high]


def test_an_empty_band_scores_nothing_and_keeps_every_pair(pairs_dir, cross_encoder_dir, tmp_path):
    out = tmp_path / "empty"
    result = verify(args(pairs_dir, cross_encoder_dir, out, "--band", "0.99", "0.99"))
    counts = result.manifest["verify"]["counts"]
    assert (
        counts["scored"] == 0
        and counts["read"] == counts["written"] == verified_table(out).num_rows
    )
    assert result.manifest["verify"]["movement"]["mean_abs_change"] is None


def test_texts_from_the_corpus_and_a_missing_text_refused_naming_the_id(
    tmp_path, tiny_st_dir, cross_encoder_dir, verified
):
    pairs = embed_and_pair(tmp_path / "no_text", tiny_st_dir, keep_text=False)
    out = tmp_path / "out"
    base = args(pairs, cross_encoder_dir, out)
    with pytest.raises(ValueError, match=r"without --keep-text.*--corpus"):
        verify(base)
    assert not out.exists()
    # A corpus that lacks one text of a pair: refused with that id, nothing touched.
    table = verified_table(verified[0])
    gone = table["id_a"][0].as_py()
    kept = [(i, t) for i, t in enumerate(TEXTS) if f"doc-{i}" != gone]
    partial = tmp_path / "partial.jsonl"
    partial.write_text("".join(json.dumps({"id": f"doc-{i}", "text": t}) + "\n" for i, t in kept))
    with pytest.raises(ValueError, match=f"no text for the id '{gone}'"):
        verify([*base, "--corpus", str(partial)])
    assert not out.exists()
    # The whole corpus gives the same scores as the kept texts did.
    corpus = write_corpus(tmp_path / "whole.jsonl", TEXTS)
    verify([*base, "--corpus", str(corpus)])
    again = verified_table(out)
    assert again.sort_by([("id_a", "ascending"), ("id_b", "ascending")]).equals(
        table.sort_by([("id_a", "ascending"), ("id_b", "ascending")])
    )


def test_bad_inputs_fail_before_any_output_is_touched(
    pairs_dir, cross_encoder_dir, tmp_path, verified
):
    out = tmp_path / "out"
    with pytest.raises(ModelLoadError):
        verify(args(pairs_dir, tmp_path / "no_model", out))
    with pytest.raises(FileNotFoundError):
        verify(args(tmp_path / "no_pairs", cross_encoder_dir, out))
    with pytest.raises(ValueError, match="written by sbert verify"):
        verify(args(verified[0], cross_encoder_dir, out))
    with pytest.raises(OptionError, match=r"--band: LOW 0\.9 is above HIGH 0\.5"):
        verify(args(pairs_dir, cross_encoder_dir, out, "--band", "0.9", "0.5"))
    with pytest.raises(OptionError, match=r"--band: must be in \[-1, 1\], got 1.5"):
        verify(args(pairs_dir, cross_encoder_dir, out, "--band", "0.5", "1.5"))
    assert not out.exists()


def test_a_cross_encoder_with_several_labels_is_refused(pairs_dir, tmp_path):
    model = build_cross_encoder(tmp_path / "ce3", num_labels=3)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="3 scores per pair; verify needs one"):
        verify(args(pairs_dir, model, out))
    assert not out.exists()


def test_dedup_reads_the_verified_folder_with_labels_and_the_sweep(verified, tmp_path):
    out, _ = verified
    table = verified_table(out)
    scores = table["score"].to_numpy()
    threshold = float(np.round(np.median(scores), 2))
    labels = tmp_path / "labels.tsv"
    rows = [
        f"{a}\t{b}\t{int(s >= threshold)}"
        for a, b, s in zip(
            table["id_a"].to_pylist(), table["id_b"].to_pylist(), scores, strict=True
        )
    ]
    labels.write_text("qid1\tqid2\tis_duplicate\n" + "\n".join(rows) + "\n")
    dedup = tmp_path / "dedup"
    summary = run_command(
        "dedup",
        [
            "--pairs",
            str(out),
            "--output",
            str(dedup),
            "--threshold",
            str(threshold),
            "--method",
            "components",
            "--labels",
            str(labels),
            "--sweep-from",
            "0.1",
        ],
    ).summary
    manifest = json.loads((dedup / "_manifest.json").read_text())
    assert (
        manifest["counts"]["rows_in"]
        == manifest["counts"]["kept"] + manifest["counts"]["removed"]
        == len(TEXTS)
    )
    # Components at T over the verified scores: recomputed here with a union-find.
    parent = {f"doc-{i}": f"doc-{i}" for i in range(len(TEXTS))}

    def find(item):
        while parent[item] != item:
            item = parent[item]
        return item

    for a, b, s in zip(table["id_a"].to_pylist(), table["id_b"].to_pylist(), scores, strict=True):
        if s >= np.float32(threshold):
            parent[find(a)] = find(b)
    removed = len(TEXTS) - len({find(item) for item in parent})
    assert summary.removed == removed
    # The labels are the verified decision at T: components find every duplicate; the pairs
    # their chains join besides are the false positives.
    together = [
        find(a) == find(b)
        for a, b in zip(table["id_a"].to_pylist(), table["id_b"].to_pylist(), strict=True)
    ]
    duplicate = scores >= np.float32(threshold)
    at = manifest["labels"]["at_threshold"]
    assert at["recall"] == 1.0
    assert at["precision"] == pytest.approx(duplicate.sum() / np.sum(together), abs=1e-6)
    thresholds = [point["threshold"] for point in manifest["methods"][0]["points"]]
    assert min(thresholds) <= 0.1 + 1e-9  # the sweep reaches below the input's cosine floor


def test_the_compute_options_reach_the_workers_and_the_manifest(
    pairs_dir, cross_encoder_dir, verified, tmp_path
):
    out = tmp_path / "bf16"
    argv = args(pairs_dir, cross_encoder_dir, out)
    result = verify([*argv, "--compute-dtype", "bfloat16", "--batch-size", "3", "--threads", "1"])
    section = result.manifest["verify"]
    assert section["model"]["dtype"] == "bfloat16"
    assert section["compute"]["batch_size"] == 3 and section["compute"]["threads"] == 1
    full = verified_table(verified[0]).sort_by([("id_a", "ascending"), ("id_b", "ascending")])
    fast = verified_table(out).sort_by([("id_a", "ascending"), ("id_b", "ascending")])
    difference = np.abs(fast["score"].to_numpy() - full["score"].to_numpy())
    # bfloat16 keeps 8 bits of mantissa: close to float32, not equal.
    assert difference.max() < 0.05 and difference.max() > 0


def test_scores_outside_a_cosines_range_publish_nothing_and_a_rerun_completes(
    pairs_dir, cross_encoder_dir, tmp_path, monkeypatch
):
    from apache_beam.ml.inference.base import PredictionResult
    from sbert_pipeline.stage_api.stops import JobFailedError
    from sbert_pipeline.verify.model_handler import CrossEncoderModelHandler

    out = tmp_path / "out"
    argv = args(pairs_dir, cross_encoder_dir, out)
    first = verify([*argv, "--band", "0.6", "0.9"])
    before = (out / "_manifest.json").read_bytes()

    def logits(self, batch, model, inference_args=None):  # an Identity head's raw logits
        return [PredictionResult(pair, 3.5) for pair in batch]

    with monkeypatch.context() as patch:
        patch.setattr(CrossEncoderModelHandler, "run_inference", logits)
        with pytest.raises(JobFailedError, match=r"scores outside \[-1, 1\] \(first: 3\.5"):
            verify([*argv, "--overwrite"])
    assert (out / "_manifest.json").read_bytes() == before
    assert PairsOutput.open(str(out)).manifest["verify"]["band"] == [0.6, 0.9]
    again = verify([*argv, "--overwrite"])
    assert again.manifest["verify"]["band"] is None
    assert again.manifest["commit"]["run_id"] != first.manifest["commit"]["run_id"]
    assert not any((out / "_attempts").glob("*"))  # the failed run's remains were cleared
