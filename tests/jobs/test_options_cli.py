"""The stage commands generated from each stage's Options accept every flag the hand-written
parsers of the previous version accepted (``flags_before_options.json``, listed from them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sbert_pipeline.jobs.stage_cli import build_parser, is_stage_command, parse
from sbert_pipeline.stage_api.options import OptionError

BEFORE = json.loads((Path(__file__).parent / "flags_before_options.json").read_text())
STAGES = sorted(name for name in BEFORE if name not in ("run", "submit"))


@pytest.mark.parametrize("stage", STAGES)
def test_every_old_flag_is_a_flag_of_the_generated_parser(stage):
    """Old spellings are hidden from the help, and still accepted."""
    assert is_stage_command(stage)
    flags = set(build_parser(stage).actions)
    missing = sorted(set(BEFORE[stage]) - flags - {"-h", "--help"})
    assert missing == []


@pytest.mark.parametrize("stage", STAGES)
def test_required_flags_stay_required(stage):
    required = {flag for flag, how in BEFORE[stage].items() if how["required"]}
    now = {flag for flag, action in build_parser(stage).actions.items() if action.required}
    assert now == required


def test_flag_names_are_field_names_with_dashes():
    parser = build_parser("index")
    assert "--memory-budget" in parser.flags
    options = parse("index", ["--embeddings", "e", "--output", "o", "--memory-budget", "1GB"])
    assert options.memory_budget == "1GB"
    assert options.memory_budget_bytes() == 10**9


def test_a_refused_value_names_the_flag():
    with pytest.raises(OptionError, match="--target-recall: must be in"):
        parse("index", ["--embeddings", "e", "--output", "o", "--target-recall", "1.5"])


def test_beam_flags_become_the_beam_options():
    options = parse(
        "index", ["--embeddings", "e", "--output", "o", "--shards", "2", "--direct_num_workers=2"]
    )
    assert options.beam_options == ("--direct_num_workers=2",)
