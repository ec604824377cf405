"""``sbert run``'s words for a model it cannot find offline and for a day-two embed."""

from __future__ import annotations

import json

import pytest
from sbert_pipeline.jobs.run_config import load_run_config
from sbert_pipeline.jobs.run_inputs import check_job_inputs
from sbert_pipeline.jobs.run_table import stage_spec

from sbert_core.errors import ModelLoadError


def test_a_short_hub_name_offline_is_named_by_the_config_key(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"text": "a text"}) + "\n")
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput:\n  path: {corpus}\nmodel: all-mpnet-base-v2\n"
        "stages: [embed]\n"
    )
    with pytest.raises(ModelLoadError) as info:
        check_job_inputs(load_run_config(config))
    message = str(info.value)
    assert message.startswith("model: all-mpnet-base-v2: not a local folder, and the Hugging")
    assert "sentence-transformers/all-mpnet-base-v2" in message
    assert "local_files_only" not in message


def test_the_run_table_shows_the_rows_a_day_two_embed_embedded():
    manifest = {
        "counts": {"read": 770, "embedded": 770, "rejected": 0},
        "incremental": {"mode": "incremental", "rows_old": 600, "rows_new": 170},
    }
    facts = stage_spec("embed").facts(manifest)
    assert facts == {"read": 770, "embedded": 170, "reused": 600, "rejected": 0}
