"""``sbert run`` with a verify stage between pairs and dedup, on tiny random models: dedup reads
the verified pairs, a second identical run skips every stage, a changed cross-encoder reruns
verify and dedup only, and the report shows how many pairs were verified and how they moved."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from sbert_pipeline.jobs.run import run
from sbert_pipeline.jobs.run_config import load_run_config

from tests.pipelines.verify.verify_data import TEXTS, build_cross_encoder, write_corpus

STAGES = ["embed", "pairs", "verify", "dedup"]


def write_job(root: Path, bi_encoder: Path, cross_encoder: Path, *, keep_text: bool) -> Path:
    """A job config: the small corpus, the tiny bi-encoder, the cross-encoder in verify."""
    corpus = write_corpus(root / "corpus.jsonl", TEXTS)
    config = root / "job.yaml"
    config.write_text(
        f"job_dir: {root / 'job'}\n"
        f"input: {{path: {corpus}, id_field: id, keep_text: {str(keep_text).lower()}}}\n"
        f"model: {bi_encoder}\n"
        f"stages: [{', '.join(STAGES)}]\n"
        "embed: {device: cpu}\n"
        "pairs: {k: 3, threshold: 0.5, method: exact}\n"
        f"verify: {{model: {cross_encoder}, device: cpu, band: [0.55, 0.99], batch_size: 4}}\n"
        "dedup: {threshold: 0.5, method: components}\n",
        encoding="utf-8",
    )
    return config


def statuses(summary) -> dict[str, str]:
    return {stage.name: stage.status for stage in summary.stages}


@pytest.fixture(scope="module")
def cross_encoders(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("run_verify_ce")
    return build_cross_encoder(root / "ce1", seed=1), build_cross_encoder(root / "ce2", seed=2)


@pytest.mark.parametrize("keep_text", [True, False])
def test_run_verifies_before_dedup_then_skips_and_reruns_on_a_new_model(
    tmp_path, tiny_st_dir, cross_encoders, keep_text
):
    first, second = cross_encoders
    config = write_job(tmp_path, tiny_st_dir, first, keep_text=keep_text)
    summary = run([str(config)])
    assert statuses(summary) == dict.fromkeys(STAGES, "ran")
    job = tmp_path / "job"
    verified = json.loads((job / "verify" / "_manifest.json").read_text())
    counts = verified["verify"]["counts"]
    assert counts["read"] == counts["scored"] + counts["above_band"] + counts["below_band"]
    assert counts["scored"] > 0 and verified["verify"]["band"] == [0.55, 0.99]
    # Texts from the embeddings when the job keeps them, else from the job's corpus.
    source = verified["verify"]["texts"]["source"]
    assert source == (str(job / "embeddings") if keep_text else str(tmp_path / "corpus.jsonl"))
    # dedup grouped the verified pairs, not the pairs stage's.
    dedup = json.loads((job / "dedup" / "_manifest.json").read_text())
    assert dedup["pairs"]["directory"] == str(job / "verify")
    assert dedup["pairs"]["source"] == "pairs" and dedup["pairs"]["pairs_threshold"] == -1.0
    facts = {stage.name: stage.facts for stage in summary.stages}
    assert facts["verify"]["verified"] == counts["scored"]
    page = re.sub(r"<[^>]+>", "", (job / "report.html").read_text(encoding="utf-8"))
    assert f"scored {counts['scored']} of {counts['read']} candidate pairs" in page
    moved = verified["verify"]["movement"]
    assert f"crossed 0.5 upwards and {moved['down']} downwards" in page

    again = run([str(config)])
    assert statuses(again) == dict.fromkeys(STAGES, "skipped")

    config.write_text(config.read_text().replace(str(first), str(second)), encoding="utf-8")
    changed = run([str(config)])
    assert statuses(changed) == {
        "embed": "skipped",
        "pairs": "skipped",
        "verify": "ran",
        "dedup": "ran",
    }
    model = json.loads((job / "verify" / "_manifest.json").read_text())["verify"]["model"]
    assert model["model_id"] == str(second)
    # A cross-encoder retrained into the same folder is a changed model too.
    retrained = build_cross_encoder(tmp_path / "retrained", seed=3)
    config.write_text(config.read_text().replace(str(second), str(retrained)), encoding="utf-8")
    assert statuses(run([str(config)]))["verify"] == "ran"
    build_cross_encoder(retrained, seed=4)
    assert statuses(run([str(config)])) == {
        "embed": "skipped",
        "pairs": "skipped",
        "verify": "ran",
        "dedup": "ran",
    }


def test_verify_needs_its_model_and_pairs(tmp_path, tiny_st_dir, cross_encoders):
    config = write_job(tmp_path, tiny_st_dir, cross_encoders[0], keep_text=True)
    text = config.read_text()
    no_model = text.replace(f"model: {cross_encoders[0]}, ", "")
    config.write_text(no_model, encoding="utf-8")
    with pytest.raises(ValueError, match=r"verify\.model: required"):
        load_run_config(config)
    config.write_text(text.replace("[embed, pairs, verify, dedup]", "[embed, verify]"))
    with pytest.raises(ValueError, match="verify reads the output of pairs"):
        load_run_config(config)
    config.write_text(text.replace("band: [0.55, 0.99]", "band: [0.99, 0.55]"))
    with pytest.raises(ValueError, match=r"verify\.band: LOW 0\.99 is above HIGH 0\.55"):
        load_run_config(config)
    # Dedup cuts the cross-encoder's scores: its threshold may lie below the pairs' cosine one
    # (without verify that is refused: those pairs were never written).
    low = text.replace("dedup: {threshold: 0.5,", "dedup: {threshold: 0.2,")
    config.write_text(low, encoding="utf-8")
    assert load_run_config(config).sections["dedup"]["threshold"] == 0.2
    config.write_text(low.replace("[embed, pairs, verify, dedup]", "[embed, pairs, dedup]"))
    with pytest.raises(ValueError, match=r"dedup\.threshold: 0\.2 is below pairs\.threshold"):
        load_run_config(config)
    config.write_text(text.replace(str(cross_encoders[0]), str(tmp_path / "no_model")))
    # Refused by the preflight, saying what verify needs (the job folder is never made).
    with pytest.raises(
        ValueError, match=r"verify: model .*no_model: no such folder\. verify needs"
    ):
        run([str(config)])
    assert not (tmp_path / "job").exists()


def test_the_job_digest_check_is_verify_inputs_beside_a_verify_section(
    tmp_path, tiny_st_dir, cross_encoders, capsys
):
    from sbert_pipeline.jobs.run import main as run_main
    from sbert_pipeline.jobs.run_config import config_as_dict

    config = write_job(tmp_path, tiny_st_dir, cross_encoders[0], keep_text=True)
    text = config.read_text()
    config.write_text(text + "verify_inputs: false\n", encoding="utf-8")
    loaded = load_run_config(config)
    assert loaded.verify is False and loaded.sections["verify"]["band"] == [0.55, 0.99]
    assert run_main([str(config), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["verify_inputs"] is False and printed["verify"]["model"] == str(
        cross_encoders[0]
    )
    again = tmp_path / "printed.yaml"
    again.write_text(yaml.safe_dump(printed), encoding="utf-8")
    assert config_as_dict(load_run_config(again)) == printed
    # Without a verify stage, `verify: false` is the digest check, as it always was.
    plain = tmp_path / "plain.yaml"
    plain.write_text(
        text.replace("[embed, pairs, verify, dedup]", "[embed, pairs, dedup]").replace(
            f"verify: {{model: {cross_encoders[0]}, device: cpu, band: [0.55, 0.99], "
            "batch_size: 4}\n",
            "verify: false\n",
        ),
        encoding="utf-8",
    )
    assert load_run_config(plain).verify is False
    config.write_text(text + "verify_inputs: false\n" + "verify: false\n", encoding="utf-8")
    with pytest.raises(ValueError, match="verify_inputs: the same setting as verify"):
        load_run_config(config)


def test_model_finetune_is_refused_when_the_finetune_stage_trains_a_cross_encoder(
    tmp_path, tiny_st_dir, cross_encoders, capsys
):
    """A cross-encoder makes no vectors: ``model: finetune`` with a ``kind: cross_encoder``
    recipe is refused before anything runs, not when embed fails after the training."""
    from sbert_pipeline.jobs.cli import main as cli_main

    train = tmp_path / "train.tsv"
    train.write_text("sentence1\tsentence2\tlabel\na b\ta c\t1\nd e\tf g\t0\n", encoding="utf-8")
    recipe = tmp_path / "train.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "model": str(tiny_st_dir),
                "kind": "cross_encoder",
                "objective": {"name": "binary_cross_entropy"},
                "train": {"path": str(train), "kind": "labelled_pairs"},
                "evaluate_base_model": False,
            }
        ),
        encoding="utf-8",
    )
    config = write_job(tmp_path, tiny_st_dir, cross_encoders[0], keep_text=True)
    text = config.read_text().replace(f"model: {tiny_st_dir}\n", "model: finetune\n")
    text = text.replace("stages: [embed,", "stages: [finetune, embed,")
    config.write_text(text + f"finetune: {{config: {recipe}}}\n", encoding="utf-8")
    assert cli_main(["run", str(config)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert "trains a cross-encoder (kind: cross_encoder)" in error and "verify.model" in error
    assert not (tmp_path / "job").exists()


@pytest.mark.parametrize("kind", ["three labels", "a bi-encoder"])
def test_a_verify_model_it_cannot_use_stops_the_job_before_any_stage(
    tmp_path, tiny_st_dir, kind, capsys
):
    """An NLI cross-encoder (three scores per pair) or a bi-encoder in verify.model is refused
    from its config files before embed runs: nothing is written."""
    from sbert_pipeline.jobs.cli import main as cli_main

    model = (
        build_cross_encoder(tmp_path / "nli", num_labels=3)
        if kind == "three labels"
        else tiny_st_dir
    )
    config = write_job(tmp_path, tiny_st_dir, model, keep_text=True)
    capsys.readouterr()  # building the model wrote progress bars
    assert cli_main(["run", str(config)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    reason = "3 scores per pair" if kind == "three labels" else "not a CrossEncoder"
    assert error.startswith("sbert: error: verify: ") and str(model) in error, error
    assert reason in error and "nothing was run or written" in error, error
    assert not (tmp_path / "job").exists()
