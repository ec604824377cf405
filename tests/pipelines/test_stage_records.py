"""The reuse rule ``sbert run`` and ``deduplicate(output=...)`` share: a stage's fingerprint, its
output's identity (the sha256 of a parsable manifest) and the job state file."""

from __future__ import annotations

import hashlib
import json

import pytest
from sbert_pipeline.jobs.run_config import STATE_FILE
from sbert_pipeline.stage_api.stage_records import (
    JOB_STATE_FILE,
    JobState,
    output_identity,
    stage_fingerprint,
)


def test_the_fingerprint_leaves_out_overwrite_and_covers_the_rest():
    base = stage_fingerprint("pairs", {"k": 5}, {"rows": "r"}, {"embeddings": "e"})
    assert (
        stage_fingerprint("pairs", {"k": 5, "overwrite": True}, {"rows": "r"}, {"embeddings": "e"})
        == base
    )
    assert stage_fingerprint("dedup", {"k": 5}, {"rows": "r"}, {"embeddings": "e"}) != base
    assert stage_fingerprint("pairs", {"k": 6}, {"rows": "r"}, {"embeddings": "e"}) != base
    assert stage_fingerprint("pairs", {"k": 5}, {"rows": "s"}, {"embeddings": "e"}) != base
    assert stage_fingerprint("pairs", {"k": 5}, {"rows": "r"}, {"embeddings": None}) != base


def test_an_output_has_an_identity_only_with_a_parsable_manifest(tmp_path):
    assert output_identity(str(tmp_path)) is None
    (tmp_path / "_manifest.json").write_text("")
    assert output_identity(str(tmp_path)) is None
    (tmp_path / "_manifest.json").write_text("[1]")
    assert output_identity(str(tmp_path)) is None
    (tmp_path / "index.json").write_text('{"files": []}')
    expected = hashlib.sha256(b'{"files": []}').hexdigest()
    assert output_identity(str(tmp_path), "index.json") == expected


def test_the_state_is_saved_under_its_file_name_and_loads_back(tmp_path):
    assert STATE_FILE == JOB_STATE_FILE  # sbert run's name, the default
    state = JobState.load(str(tmp_path), "_other_state.json")
    assert state.stages == {}
    state.record("pairs", "f", "i", 1.25)
    assert not (tmp_path / JOB_STATE_FILE).exists()
    saved = json.loads((tmp_path / "_other_state.json").read_text())
    assert saved["stages"]["pairs"]["fingerprint"] == "f"
    again = JobState.load(str(tmp_path), "_other_state.json")
    assert again.is_current("pairs", "f", "i") and not again.is_current("pairs", "f", "j")
    again.forget("pairs")
    assert JobState.load(str(tmp_path), "_other_state.json").stages == {}
    (tmp_path / JOB_STATE_FILE).write_text("{}")
    with pytest.raises(ValueError, match="not a readable job state"):
        JobState.load(str(tmp_path))
