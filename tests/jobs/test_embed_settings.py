"""One encoder-settings type for every command (issue 14, item 3).

``sbert embed --pooling cls`` and ``--batch-size`` used to be accepted and ignored: the manifest
recorded the model's own pooling, the vectors were mean-pooled and the batch size never reached
the encoder. These tests run the embed job on the tiny model (the FnApiRunner runs in this
process, so a patched ``SentenceEncoder`` is the one the workers use), and check that embed,
encode, eval, search and ``sbert run`` build the same settings from the same flags.
"""

from __future__ import annotations

import json
import re
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.jobs import stage_cli
from sbert_pipeline.jobs.cli import build_parser as cli_parser
from sbert_pipeline.jobs.model_flags import settings_from_flags
from sbert_pipeline.jobs.run_config import load_run_config, stage_options
from sbert_pipeline.stage_api.model_options import query_encoder_settings

from sbert_core import SentenceEncoder
from sbert_core.inference.encoder_settings import EncoderSettings
from tests.stage_commands import embed

TEXTS = [
    "a man plays the guitar",
    "A woman is eating food.",
    "the dog runs on the road in the rain",
    "how do i play music?",
    "Why is the sky blue and the sun red?",
    "Quick brown foxes jump; 42 times!",
]


def _embed(tmp_path: Path, model: Path, *flags: str) -> tuple[dict, dict[str, np.ndarray]]:
    """Run ``sbert embed`` on TEXTS; the manifest and the vector of each text."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "embeddings"
    argv = ["--input", str(corpus), "--output", str(out), "--model", str(model)]
    summary = embed([*argv, "--keep-text", "--device", "cpu", *flags])
    assert (summary.read, summary.embedded, summary.rejected) == (len(TEXTS), len(TEXTS), 0)
    manifest = json.loads((out / "_manifest.json").read_text(encoding="utf-8"))
    table = pq.read_table(sorted(out.glob("part-*.parquet")))
    vectors = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
    return manifest, dict(zip(table.column("text").to_pylist(), vectors, strict=True))


def test_embed_pooling_cls_is_recorded_and_used(tmp_path, tiny_st_dir):
    manifest, vectors = _embed(tmp_path, tiny_st_dir, "--pooling", "cls")
    assert manifest["pooling"] == "cls"
    cls = SentenceEncoder.load(tiny_st_dir, device="cpu", pooling="cls").encode(TEXTS)
    mean = SentenceEncoder.load(tiny_st_dir, device="cpu").encode(TEXTS)
    got = np.stack([vectors[text] for text in TEXTS])
    assert np.abs(got - cls).max() <= 1e-5
    assert np.abs(got - mean).max() > 1e-2  # the tiny model's two poolings differ clearly


def test_embed_batch_size_reaches_the_encoder(tmp_path, tiny_st_dir, monkeypatch):
    calls: list[dict] = []
    original = SentenceEncoder.encode_detailed

    def recording(self, texts, **kwargs):
        calls.append(kwargs)
        return original(self, texts, **kwargs)

    monkeypatch.setattr(SentenceEncoder, "encode_detailed", recording)
    manifest, vectors = _embed(tmp_path, tiny_st_dir, "--batch-size", "2")
    assert calls, "the workers never called the encoder"
    assert all(call.get("batch_size") == 2 for call in calls), calls
    # Batching changes how texts are grouped, not what they embed to.
    expected = SentenceEncoder.load(tiny_st_dir, device="cpu").encode(TEXTS)
    assert np.abs(np.stack([vectors[text] for text in TEXTS]) - expected).max() <= 1e-5
    assert manifest["pooling"] == "mean"


def test_embed_refuses_a_batch_size_below_one_before_touching_the_output(tmp_path, tiny_st_dir):
    with pytest.raises(ValueError, match="--batch-size: must be at least 1, got 0"):
        _embed(tmp_path, tiny_st_dir, "--batch-size", "0")
    assert not (tmp_path / "embeddings").exists()


MODEL = "some/model"
ENCODER_FLAGS = [
    *("--model", MODEL, "--device", "cpu", "--pooling", "cls", "--max-seq-length", "16"),
    *("--batch-size", "2", "--token-budget", "64", "--threads", "1", "--allow-pickle"),
]
EXPECTED = EncoderSettings(
    model=MODEL,
    device="cpu",
    dtype="bfloat16",
    pooling="cls",
    normalize=False,
    max_seq_length=16,
    batch_size=2,
    token_budget=64,
    num_threads=1,
    allow_pickle=True,
)


def _embed_settings(argv: list[str]) -> EncoderSettings:
    """The settings ``sbert embed`` runs with for ``argv`` (validated, as the job does)."""
    settings = stage_cli.parse("embed", argv).encoder_settings()
    settings.validate()
    return settings


def test_every_command_builds_the_same_settings_from_the_same_flags():
    io = ["--input", "corpus.txt", "--output", "out"]
    argv = [*io, *ENCODER_FLAGS, "--compute-dtype", "bfloat16", "--no-normalize"]
    # embed adds only the task: a corpus is embedded as documents (encode_document)
    assert _embed_settings(argv) == replace(EXPECTED, task="document")
    argv = ["encode", *io[:3], "out.npy", *ENCODER_FLAGS, "--dtype", "bfloat16", "--no-normalize"]
    assert settings_from_flags(cli_parser().parse_args(argv)) == EXPECTED
    # eval has no --normalize: the model's own normalisation.
    for command in (["eval", "sts"], ["eval", "pairs"]):
        argv = [*command, "--data", "pairs.tsv", *ENCODER_FLAGS, "--dtype", "bfloat16"]
        assert settings_from_flags(cli_parser().parse_args(argv)) == replace(
            EXPECTED, normalize=None
        )
    # search: where the model runs from its flags, how the vectors are made from the index.
    manifest = {"model_id": "indexed/model", "pooling": "cls", "normalized": False}
    manifest["max_seq_length"] = 16
    query_flags = ["--model", MODEL, "--device", "cpu", "--threads", "1", "--allow-pickle"]
    options = stage_cli.parse("search", ["--index", "idx", "q", *query_flags])
    assert query_encoder_settings(options, manifest) == replace(
        EXPECTED, dtype="float32", batch_size=None, token_budget=None
    )
    default_model = stage_cli.parse("search", ["--index", "idx", "q"])
    assert query_encoder_settings(default_model, manifest).model == "indexed/model"


def test_sbert_run_embeds_with_the_settings_it_checked(tmp_path, tiny_st_dir):
    """``sbert run``'s embed section, its embed command line and embed's own parser agree."""
    from sbert_pipeline.jobs.run_inputs import check_job_inputs
    from sbert_pipeline.jobs.run_stages import plan_stages

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n", encoding="utf-8")
    config_path = tmp_path / "job.yaml"
    config_path.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput: {{path: {corpus}}}\nmodel: {tiny_st_dir}\n"
        "stages: [embed]\nembed: {compute_dtype: bfloat16, pooling: cls, normalize: false, "
        "max_seq_length: 16, batch_size: 2, token_budget: 64, device: cpu, threads: 1, "
        "allow_pickle: true}\n",
        encoding="utf-8",
    )
    config = load_run_config(config_path)
    checked = check_job_inputs(config)
    (plan,) = plan_stages(config, checked, [])
    expected = replace(EXPECTED, model=str(tiny_st_dir), task="document")
    assert stage_options(config, "embed").encoder_settings() == expected
    assert plan.options.encoder_settings() == expected
    # What run checked is what the embed manifest will record: the cls pooling.
    model = checked.external("embed")["model"]
    assert model["pooling"] == "cls" and model["max_seq_length"] == 16


def test_settings_split_into_load_and_encode_options(tiny_st_dir):
    settings = EncoderSettings(str(tiny_st_dir), device="cpu", pooling="cls", batch_size=3)
    assert settings.encode_kwargs() == {"batch_size": 3}
    assert EncoderSettings("m").encode_kwargs() == {}
    assert settings.inspect().describe()["pooling"] == "cls"
    encoder = settings.load()
    assert encoder.pooling.mode == "cls" and encoder.device.type == "cpu"
    # Every field reaches inspect/load or encode: none is parsed and then dropped.
    from sbert_core.inference import encoder_settings as module

    grouped = {"model", *module._MODEL_FIELDS, *module._RUNTIME_FIELDS, *module._ENCODE_FIELDS}
    assert grouped == {item.name for item in fields(EncoderSettings)}


def _run_config(tmp_path: Path, model: Path, embed_section: str):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n", encoding="utf-8")
    config_path = tmp_path / "job.yaml"
    config_path.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput: {{path: {corpus}}}\nmodel: {model}\n"
        f"stages: [embed]\nembed: {embed_section}\n",
        encoding="utf-8",
    )
    return load_run_config(config_path)


def test_sbert_run_takes_the_cpu_backend_as_a_typed_key(tmp_path, tiny_st_dir):
    from sbert_pipeline.jobs.run_inputs import check_job_inputs
    from sbert_pipeline.jobs.run_stages import plan_stages

    config = _run_config(tmp_path, tiny_st_dir, "{cpu_backend: openvino, device: cpu}")
    assert stage_options(config, "embed").encoder_settings().backend == "openvino"
    checked = check_job_inputs(config)
    (plan,) = plan_stages(config, checked, [])
    assert plan.options.encoder_settings().backend == "openvino"
    assert checked.external("embed")["model"]["compute"]["backend"] == "openvino"
    # Left out, the stage's option is the command's default (torch).
    (default,) = plan_stages(_run_config(tmp_path, tiny_st_dir, "{device: cpu}"), checked, [])
    assert default.options.encoder_settings().backend == "torch"


def test_sbert_run_refuses_an_unknown_cpu_backend_and_reads_the_flag_spelling(
    tmp_path, tiny_st_dir
):
    from sbert_pipeline.jobs.run_config import stage_options

    with pytest.raises(
        ValueError,
        match=re.escape("embed.cpu_backend: 'onnx' is not one of: torch, openvino"),
    ):
        _run_config(tmp_path, tiny_st_dir, "{cpu_backend: onnx}")
    # options: spells the flag as on the command line; it sets the same field.
    config = _run_config(tmp_path, tiny_st_dir, "{options: {cpu-backend: openvino}}")
    assert stage_options(config, "embed").cpu_backend == "openvino"
    with pytest.raises(ValueError, match=re.escape("embed.options.cpu-backend: set it as")):
        _run_config(tmp_path, tiny_st_dir, "{cpu_backend: torch, options: {cpu-backend: openvino}}")
