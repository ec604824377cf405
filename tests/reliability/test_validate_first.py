"""Item 4 of issue 13 (first half): every value is checked before any output is touched.

For each command and for ``sbert run`` (every stage's values before the first stage runs), a
bad device, thread count, token budget, FAISS factory or option path is refused with a message
naming it, and the previous output stays byte for byte as it was. A run in which every row is
rejected fails by default and publishes nothing.
"""

from __future__ import annotations

import json

import pytest
import torch
from output_folders_helpers import embed_argv, snapshot, texts, write_txt
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.jobs.run import StageFailedError
from sbert_pipeline.jobs.run import run as sbert_run
from sbert_pipeline.stage_api.stops import JobFailedError

from tests.stage_commands import cluster, embed, index

BAD_ENCODER_VALUES = [
    (["--device", "tpu9"], r"--device 'tpu9' is not a device"),
    (["--threads", "0"], r"--threads: must be at least 1"),
    (["--token-budget", "-5"], r"--token-budget: must be at least 1"),
]
if not torch.cuda.is_available():
    BAD_ENCODER_VALUES.append((["--device", "cuda"], r"CUDA is not available"))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory, tiny_st_dir):
    """A corpus and complete embed, index and cluster outputs made from it."""
    root = tmp_path_factory.mktemp("outputs")
    corpus = write_txt(root / "in", texts(80))
    embed(embed_argv(corpus, root / "embeddings", tiny_st_dir))
    index(["--embeddings", str(root / "embeddings"), "--output", str(root / "index")])
    cluster(
        ["--embeddings", str(root / "embeddings"), "--output", str(root / "clusters"), "--k", "3"]
    )
    return root, corpus


@pytest.mark.parametrize(("bad", "message"), BAD_ENCODER_VALUES)
def test_embed_refuses_bad_encoder_values_before_touching_the_output(
    outputs, tiny_st_dir, bad, message
):
    root, corpus = outputs
    before = snapshot(root / "embeddings")
    with pytest.raises(ValueError, match=message):
        embed(embed_argv(corpus, root / "embeddings", tiny_st_dir, "--overwrite", *bad))
    assert snapshot(root / "embeddings") == before


def test_index_refuses_a_factory_the_corpus_cannot_train_before_touching_the_output(outputs):
    root, _ = outputs
    before = snapshot(root / "index")
    argv = ["--embeddings", str(root / "embeddings"), "--output", str(root / "index")]
    with pytest.raises(ValueError, match=r"--factory IVF99999,Flat needs at least 99999"):
        index([*argv, "--factory", "IVF99999,Flat", "--overwrite"])
    assert snapshot(root / "index") == before


def test_cluster_refuses_a_missing_text_source_before_touching_the_output(outputs, tmp_path):
    root, _ = outputs
    before = snapshot(root / "clusters")
    missing = tmp_path / "nowhere" / "*.jsonl"
    argv = ["--embeddings", str(root / "embeddings"), "--output", str(root / "clusters")]
    with pytest.raises(FileNotFoundError, match="nowhere"):
        cluster([*argv, "--k", "3", "--text-from", str(missing), "--overwrite"])
    assert snapshot(root / "clusters") == before


def test_a_run_in_which_every_row_is_rejected_fails_and_publishes_nothing(
    outputs, tiny_st_dir, tmp_path
):
    root, _ = outputs
    before = snapshot(root / "embeddings")
    corpus = tmp_path / "all_bad.jsonl"
    corpus.write_text('{"text": ""}\n{"text": "   "}\n')
    argv = embed_argv(corpus, root / "embeddings", tiny_st_dir, "--overwrite")
    reasons = r"most common reasons: empty text \(1\), whitespace-only text \(1\)"
    with pytest.raises(
        JobFailedError, match=rf"all 2 rows were rejected.*{reasons}.*--allow-all-rejected"
    ):
        embed(argv)
    assert {k: v for k, v in snapshot(root / "embeddings").items() if k[0] != "_"} == {
        k: v for k, v in before.items() if k[0] != "_"
    }
    assert EmbeddingsDataset.open(str(root / "embeddings")).count == 80
    out = tmp_path / "published"
    embed(embed_argv(corpus, out, tiny_st_dir, "--allow-all-rejected"))
    counts = json.loads((out / "_manifest.json").read_text())["counts"]
    assert (counts["read"], counts["embedded"], counts["rejected"]) == (2, 0, 2)


@pytest.fixture(scope="module")
def job(tmp_path_factory, tiny_st_dir):
    """A small ``sbert run`` job (embed, index, cluster) run once: (argv, job dir)."""
    root = tmp_path_factory.mktemp("job")
    corpus = write_txt(root / "in", texts(90))
    config = root / "job.yaml"
    config.write_text(
        f"job_dir: {root / 'job'}\n"
        f"input:\n  path: {corpus}\n"
        f"model: {tiny_st_dir}\n"
        "runner: local\n"
        "stages: [embed, index, cluster]\n"
        "cluster:\n  method: kmeans\n  k: 3\n"
    )
    sbert_run([str(config)])
    return [str(config)], root / "job"


@pytest.mark.parametrize(
    ("setting", "error", "message"),
    [
        ("embed.device=tpu9", ValueError, r"embed: --device 'tpu9'"),
        ("embed.threads=0", ValueError, r"embed.threads: must be at least 1"),
        ("embed.token_budget=-5", ValueError, r"embed.token_budget: must be at least 1"),
        ("cluster.options={text-from: /no/such/dir/*.txt}", ValueError, r"cluster.text_from: set"),
    ],
)
def test_sbert_run_checks_every_stage_before_running_any(job, setting, error, message):
    argv, job_dir = job
    before = snapshot(job_dir)
    with pytest.raises(error, match=message):
        sbert_run([*argv, "--set", setting])
    assert snapshot(job_dir) == before  # not even the job state or the config copy changed


def test_sbert_run_keeps_the_previous_index_when_its_factory_cannot_train(job):
    argv, job_dir = job
    before = snapshot(job_dir / "index"), snapshot(job_dir / "embeddings")
    with pytest.raises(StageFailedError, match=r"IVF99999,Flat needs at least 99999 training"):
        sbert_run([*argv, "--set", "index.factory=IVF99999,Flat"])
    assert (snapshot(job_dir / "index"), snapshot(job_dir / "embeddings")) == before
