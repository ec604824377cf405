"""The typed options every stage declares (pipelines/stage_api/options.py): types, required
fields, checks and the YAML front end."""

from __future__ import annotations

import math

import pytest

from pipelines import index
from pipelines.stage_api.options import OptionError, defaults, options_from_mapping


def test_options_are_checked_when_built():
    with pytest.raises(OptionError, match="--embeddings: required"):
        index.Options(output="o")
    with pytest.raises(OptionError, match="--queries: expected an integer"):
        index.Options(embeddings="e", output="o", queries="10")
    with pytest.raises(OptionError, match="--target-recall: must be in"):
        index.Options(embeddings="e", output="o", target_recall=math.nan)
    with pytest.raises(OptionError, match="--metric: expected one of 'ip', 'l2'"):
        index.Options(embeddings="e", output="o", metric="cos")


def test_an_int_is_accepted_for_a_float_and_stored_as_one():
    options = index.Options(embeddings="e", output="o", target_recall=1)
    assert options.target_recall == 1.0 and isinstance(options.target_recall, float)


def test_a_mapping_names_its_key_and_refuses_owned_and_unknown_keys():
    owned = {"embeddings": "job/embeddings", "output": "job/index"}
    built = options_from_mapping(index.Options, {"memory-budget": "1GB"}, "index", owned=owned)
    assert built.memory_budget == "1GB" and built.embeddings == "job/embeddings"
    with pytest.raises(ValueError, match=r"index.memory_budgt: .*did you mean 'memory_budget'"):
        options_from_mapping(index.Options, {"memory_budgt": "1GB"}, "index", owned=owned)
    with pytest.raises(ValueError, match=r"index\.output: set by sbert run"):
        options_from_mapping(index.Options, {"output": "x"}, "index", owned=owned)
    with pytest.raises(ValueError, match=r"^index.target_recall: must be in \(0, 1\]"):
        options_from_mapping(index.Options, {"target_recall": 2.0}, "index", owned=owned)


def test_defaults_and_to_dict_are_plain_values():
    assert defaults(index.Options)["memory_budget"] == "auto"
    recorded = index.Options(embeddings="e", output="o").to_dict()
    assert "beam_options" not in recorded and recorded["factory"] == "auto"
