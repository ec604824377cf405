"""Issue 29, item 1 for embed: ``--memory-budget`` is checked before the run reads its input
(model weights, one inference call, the writers' buffers and the records the runner holds
between steps), a run over it is refused in one line naming what to change, and the manifest
records the budget, what the run needed and the peak RSS measured."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from output_folders_helpers import embed_argv, texts, write_txt
from sbert_pipeline.embed.memory import (
    BYTES_PER_CORPUS_BYTE,
    COMPRESSION_RATIO,
    RUNTIME,
    embed_memory,
)
from sbert_pipeline.io.resources import MemoryBudget
from sbert_pipeline.jobs.cli import main as sbert

from sbert_core.inference.encoder_settings import EncoderSettings

BUDGET = MemoryBudget(8 << 30, "--memory-budget 8GiB")


@pytest.fixture(scope="module")
def tiny(tiny_st_dir):
    settings = EncoderSettings(model=str(tiny_st_dir), device="cpu")
    return settings, settings.inspect()


def _need(tiny, files, **changes):
    settings, info = tiny
    kwargs = {"max_batch_size": 8192, "dtype": "float32", "weight_bytes": 1 << 20, **changes}
    return embed_memory(BUDGET, info, settings, files, **kwargs)


def test_the_need_grows_with_what_it_counts(tiny):
    files = [("a.txt", "a", 1_000_000)]
    base = _need(tiny, files)
    assert base.parts["runtime"] == RUNTIME
    assert base.parts["model_weights"] == 2 << 20
    assert base.parts["records_between_steps"] == BYTES_PER_CORPUS_BYTE * 1_000_000
    gz = _need(tiny, [("a.txt.gz", "a", 1_000_000)])
    records = base.parts["records_between_steps"]
    assert gz.parts["records_between_steps"] == COMPRESSION_RATIO * records
    assert _need(tiny, files, max_batch_size=512).needed < base.needed
    settings, info = tiny
    longer = embed_memory(
        BUDGET,
        info,
        replace(settings, token_budget=16_384),
        files,
        max_batch_size=8192,
        dtype="float32",
        weight_bytes=1 << 20,
    )
    assert longer.parts["inference_batch"] > base.parts["inference_batch"]
    assert base.needed == sum(base.parts.values())


def test_a_run_over_the_budget_is_refused_before_it_starts(tmp_path, tiny_st_dir, capsys):
    corpus = write_txt(tmp_path / "in", texts(50))
    out = tmp_path / "out"
    argv = ["-q", "embed", *embed_argv(corpus, out, tiny_st_dir), "--memory-budget", "100MB"]
    assert sbert(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert "raise --memory-budget to at least" in err
    assert "--max-batch-size" in err and "--max-seq-length" in err
    assert not out.exists()  # refused before the output folder was taken


def test_a_bad_budget_names_the_option(tmp_path, tiny_st_dir, capsys):
    corpus = write_txt(tmp_path / "in", texts(5))
    argv = ["-q", "embed", *embed_argv(corpus, tmp_path / "out", tiny_st_dir)]
    assert sbert([*argv, "--memory-budget", "lots"]) == 2
    assert "--memory-budget" in capsys.readouterr().err


def test_the_manifest_records_the_budget_the_need_and_the_peak(tmp_path, tiny_st_dir):
    corpus = write_txt(tmp_path / "in", texts(50))
    out = tmp_path / "out"
    argv = ["-q", "embed", *embed_argv(corpus, out, tiny_st_dir), "--memory-budget", "auto"]
    assert sbert(argv) == 0
    recorded = json.loads((out / "_manifest.json").read_text())["memory_budget"]
    assert recorded["source"].startswith("auto: ")
    assert 0 < recorded["needed_bytes"] <= recorded["bytes"]
    assert recorded["needed_bytes"] == sum(recorded["needed_parts"].values())
    assert recorded["peak_rss_bytes"] > 100 << 20  # torch and Beam are loaded by then
