"""The typed options every stage declares (pipelines/stage_api/options.py): types, required
fields, checks, the output apart from every input, and the YAML front end."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import get_origin

import pytest
from sbert_pipeline import cluster, dedup, embed, finetune, index, pairs, search, verify
from sbert_pipeline.jobs.cli import main
from sbert_pipeline.stage_api.options import (
    OptionError,
    defaults,
    field_types,
    options_from_mapping,
)


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


# Each stage with the smallest options it accepts, and one input option of each kind it reads.
STAGE_INPUTS = [
    (embed.Options, {}, "input"),
    (embed.Options, {}, "model"),
    (index.Options, {}, "embeddings"),
    (cluster.Options, {"k": 2}, "embeddings"),
    (cluster.Options, {"k": 2}, "text_from"),
    (pairs.Options, {}, "embeddings"),
    (pairs.Options, {}, "known_pairs"),
    (verify.Options, {}, "pairs"),
    (verify.Options, {}, "corpus"),
    (verify.Options, {}, "model"),
    (dedup.Options, {"threshold": 0.9}, "pairs"),
    (dedup.Options, {"threshold": 0.9}, "embeddings"),
    (dedup.Options, {"threshold": 0.9}, "corpus"),
    (dedup.Options, {"threshold": 0.9, "pairs": "in/p"}, "against"),
    (dedup.Options, {"threshold": 0.9}, "labels"),
    (finetune.Options, {}, "model"),
    (finetune.Options, {}, "config"),
]
# Valid values of the required inputs, apart from every output below.
REQUIRED = {
    embed.Options: {"input": "in/corpus.txt"},
    index.Options: {"embeddings": "in/emb"},
    cluster.Options: {"embeddings": ["in/emb"]},
    pairs.Options: {"embeddings": ["in/emb"]},
    verify.Options: {"pairs": "in/pairs", "model": "in/model"},
    dedup.Options: {},
    finetune.Options: {},
}


def _built(options_type, extra, name, value, output, **more):
    values = {**REQUIRED[options_type], **extra, **more, "output": output}
    listed = get_origin(field_types(options_type)[name]) is tuple
    values[name] = [value] if listed else value
    if options_type is dedup.Options and "pairs" not in values and name != "pairs":
        values["pairs"] = "in/p"
    return options_type(**values)


@pytest.mark.parametrize(("options_type", "extra", "name"), STAGE_INPUTS)
@pytest.mark.parametrize(
    ("output", "why"),
    [
        ("data/x", "is --{flag} data/x itself"),
        ("data/x/out", "is inside --{flag} data/x"),
        ("data", "holds --{flag} data/x"),
    ],
)
@pytest.mark.parametrize("overwrite", [False, True])
def test_an_output_equal_to_inside_or_above_an_input_is_refused(
    tmp_path, monkeypatch, options_type, extra, name, output, why, overwrite
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "x").mkdir(parents=True)  # a model is a path where it exists
    more = {"overwrite": True} if overwrite else {}
    flag = name.replace("_", "-")
    with pytest.raises(OptionError, match=re.escape(f"--output: {output} {why.format(flag=flag)}")):
        _built(options_type, extra, name, "data/x", output, **more)
    assert _built(options_type, extra, name, "data/x", "elsewhere" + output[4:], **more)


def test_search_hits_go_apart_from_the_index_and_the_queries(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OptionError, match=r"--output: ix/hits.jsonl is inside --index ix"):
        search.Options(index="ix", query=["q"], output="ix/hits.jsonl")
    with pytest.raises(OptionError, match=r"--output: q.jsonl is --queries q.jsonl itself"):
        search.Options(index="ix", queries="q.jsonl", output="q.jsonl")
    assert search.Options(index="ix", queries="q.jsonl", output="hits.jsonl")


def test_every_stage_names_its_inputs():
    for options_type in {*REQUIRED, search.Options}:
        fields = {item.name for item in dataclasses.fields(options_type)}
        assert options_type.INPUT_OPTIONS and set(options_type.INPUT_OPTIONS) <= fields


def test_an_output_that_links_to_an_input_is_the_input(tmp_path):
    (tmp_path / "emb").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "emb")
    with pytest.raises(OptionError, match=r"link \(that is .*emb\) is --embeddings .*emb itself"):
        pairs.Options(embeddings=[str(tmp_path / "emb")], output=str(tmp_path / "link"))


def test_a_corpus_glob_allows_a_sibling_output_and_refuses_one_it_could_match(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert embed.Options(input="data/*.jsonl", output="data/emb")
    with pytest.raises(OptionError, match=r"--output: data/emb is inside --input data/\*\*"):
        embed.Options(input="data/**", output="data/emb")
    with pytest.raises(OptionError, match=r"--output: data holds --input data/\*\.jsonl"):
        embed.Options(input="data/*.jsonl", output="data")
    with pytest.raises(OptionError, match=r"data/e\.jsonl is a name --input data/\*\.jsonl"):
        embed.Options(input="data/*.jsonl", output="data/e.jsonl")


def test_a_hub_model_id_is_not_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert embed.Options(input="c.txt", output="org/model", model="org/model")
    assert embed.Options(input="c.txt", output="all-MiniLM-L6-v2", model="all-MiniLM-L6-v2")
    (tmp_path / "all-MiniLM-L6-v2").mkdir()  # an earlier output of that name: still the model
    assert embed.Options(input="c.txt", output="all-MiniLM-L6-v2", model="all-MiniLM-L6-v2")


def test_sbert_verify_into_its_own_pairs_folder_is_refused_before_anything_is_written(
    tmp_path, capsys
):
    pairs_dir = tmp_path / "P"
    argv = ["verify", "--pairs", str(pairs_dir), "--model", "m", "--output", f"{pairs_dir}/v"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--output: {pairs_dir}/v is inside --pairs {pairs_dir}" in err
    assert not pairs_dir.exists()
