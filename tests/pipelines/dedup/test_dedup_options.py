"""The dedup stage's options: one --keep for every method, its old spellings, the checks."""

from __future__ import annotations

import pytest
from sbert_pipeline import dedup
from sbert_pipeline.jobs.stage_cli import parse
from sbert_pipeline.stage_api.options import OptionError

BASE = {"pairs": "p", "output": "o", "threshold": 0.9}
ARGV = ["--pairs", "p", "--output", "o", "--threshold", "0.9"]


@pytest.mark.parametrize("method", ["components", "star", "ranked", "average"])
@pytest.mark.parametrize("keep", ["first", "longest", "central", "random", "column:votes"])
def test_every_keep_value_applies_to_every_method(method, keep):
    options = dedup.Options(**BASE, method=method, keep=keep, corpus="c.jsonl")
    assert options.keep == options.keep_policy == keep
    assert options.method_settings(None).keep == keep


@pytest.mark.parametrize("method", ["components", "star", "ranked", "average"])
def test_without_keep_every_method_keeps_the_central_member(method):
    # One keep default everywhere (components kept the first before).
    options = dedup.Options(**BASE, method=method)
    assert options.keep == options.keep_policy == options.method_settings(None).keep == "central"


def test_the_defaults_hold_the_threshold_and_limit_the_group_size():
    options = dedup.Options(**BASE)
    settings = options.method_settings(0.7)
    assert (options.method, settings.radius_at(0.9), settings.max_group_size) == (
        "star",
        0.9,
        1000,
    )
    with pytest.raises(OptionError, match="--max-group-size: must be at least 2"):
        dedup.Options(**BASE, max_group_size=1)


@pytest.mark.parametrize(
    ("argv", "keep"),
    [
        (["--keep", "longest"], "longest"),
        (["--rank", "longest"], "longest"),  # the old flag
        (["--rank", "corpus"], "first"),  # the old value
        (["--keep", "corpus"], "first"),
        (["--method", "components", "--rank", "central"], "central"),  # refused before
        (["--keep", "random", "--method", "components"], "random"),  # components only had 3
    ],
)
def test_old_and_new_spellings_on_the_command_line(argv, keep):
    assert parse("dedup", [*ARGV, *argv]).keep_policy == keep


def test_the_old_names_and_values_are_declared_for_the_options_base():
    """The options base converts them (Python, YAML, command line) with a deprecation line."""
    assert dedup.Options.RENAMED == {"rank": "keep", "label_column": "label_field"}
    assert dedup.Options.OLD_VALUES["keep"] == {"corpus": "first"}
    assert dedup.Options.OLD_VALUES["stable_keep"] == {"auto": None, "on": True, "off": False}
    options = dedup.Options(**BASE, keep="corpus")
    assert (options.keep_policy, options.method_settings(None).keep) == ("first", "first")


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"keep": "tallest"}, "--keep: must be one of first, longest, central, random"),
        ({"keep": "column:"}, "--keep: must be one of"),
        ({"keep": "column:votes"}, "--keep: column:votes reads the field from the corpus"),
        ({"threshold": 1.5}, r"--threshold: must be in \[-1, 1\]"),
        ({"output": None}, "--output: required"),
        ({"apply": True}, "--apply: writes the deduplicated corpus and needs --corpus"),
        ({"method": "components", "radius": 0.85}, "--radius: is for --method star or split"),
        ({"radius": 0.95}, "--radius: must not exceed --threshold 0.9"),
        ({"mutual_k": 0}, "--mutual-k: must be at least 1"),
        ({"target_precision": 0.9}, "--target-precision: is measured on labelled pairs"),
        ({"sweep_from": 0.95, "sweep_to": 0.9}, "--sweep-from: must not exceed --sweep-to"),
        ({"sweep_step": 0.0}, "--sweep-step: must be positive"),
        ({"format": "xml"}, "--format: must be one of"),
        ({"known_duplicates_field": "id"}, "--known-duplicates-field: must name a corpus field"),
    ],
)
def test_bad_values_are_refused_when_the_options_are_built(values, match):
    with pytest.raises(OptionError, match=match):
        dedup.Options(**{**BASE, **values})


def test_a_dry_run_needs_no_output():
    assert dedup.Options(pairs="p", threshold=0.9, dry_run=True).output is None
