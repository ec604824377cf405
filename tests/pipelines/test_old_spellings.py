"""Old option names and values keep working for one version, each with one deprecation line,
from Python, YAML and the command line; the new spellings work without a word."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pytest
from sbert_pipeline import finetune, index, pairs
from sbert_pipeline.jobs.options_cli import (
    build_options_parser,
    options_flags,
    parse_options,
    switch_flags,
)
from sbert_pipeline.jobs.stage_cli import parse
from sbert_pipeline.stage_api import options as options_module
from sbert_pipeline.stage_api.old_spellings import Sets, forget_said
from sbert_pipeline.stage_api.options import (
    OptionError,
    StageOptions,
    option,
    options_from_mapping,
)

REMOVED = "it will be removed in the next version"


@dataclass(frozen=True)
class Toy(StageOptions):
    """A toy stage with every kind of old spelling."""

    RENAMED: ClassVar[Mapping[str, str]] = {"label_column": "label_field", "fast": "quick"}
    OLD_VALUES: ClassVar[Mapping[str, Mapping[Any, Any]]] = {
        "stable_keep": {"auto": None, "on": True, "off": False},
        "mode": {"old": "new"},
        "known_field": {"none": Sets(known_field=None, known=False)},
    }

    label_field: str = option("label", "the label column")
    quick: bool = option(False, "go fast")
    stable_keep: bool | None = option(help="keep what was kept (default: auto)")
    mode: Literal["new", "other"] = option("new", "a mode")
    known_field: str | None = option(help="a field")
    known: bool = option(True, "use the known field")


@pytest.fixture(autouse=True)
def each_line_said_again():
    forget_said()
    yield
    forget_said()


def said(caplog) -> list[str]:
    return [message for message in caplog.messages if REMOVED in message]


def test_an_old_python_keyword_sets_the_new_field_with_one_line(caplog):
    built = pairs.Options(embeddings=["e"], output="o", id_column="i", embedding_column="v")
    assert (built.id_field, built.embedding_field) == ("i", "v")
    assert said(caplog) == [
        f"id_column is the old name of id_field; {REMOVED}",
        f"embedding_column is the old name of embedding_field; {REMOVED}",
    ]
    pairs.Options(embeddings=["e"], output="o", id_column="i")
    assert len(said(caplog)) == 2  # once per process
    assert built.id_column == "i"  # read by its old name too


def test_the_new_names_say_nothing(caplog):
    built = pairs.Options(embeddings=["e"], output="o", id_field="i", text_field="t")
    assert built.replace(k=3).text_field == "t"
    assert parse("index", ["--embeddings", "e", "--output", "o", "--embedding-field", "v"])
    assert said(caplog) == []


def test_an_old_name_given_with_its_new_name_must_agree():
    assert pairs.Options(embeddings=["e"], output="o", id_column="i", id_field="i").id_field == "i"
    with pytest.raises(OptionError, match="id_column is the old name of id_field: give one"):
        pairs.Options(embeddings=["e"], output="o", id_column="i", id_field="j")


def test_an_old_yaml_key_is_read_with_one_line(caplog):
    owned = {"embeddings": "job/emb", "output": "job/index", "id_column": None}
    built = options_from_mapping(index.Options, {"text-column": "body"}, "index", owned=owned)
    assert built.text_field == "body" and built.id_field is None
    assert said(caplog) == [f"index.text_column is the old name of index.text_field; {REMOVED}"]
    with pytest.raises(ValueError, match=r"^index.id_field: set by sbert run"):
        options_from_mapping(index.Options, {"id_field": "x"}, "index", owned=owned)


def test_an_old_flag_is_a_hidden_alias_with_one_line(caplog):
    argv = ["--embeddings", "e", "--output", "o", "--text-column", "t", "--id-column", "i"]
    built = parse("pairs", argv)
    assert (built.text_field, built.id_field) == ("t", "i")
    assert said(caplog) == [
        f"--text-column is the old name of --text-field; {REMOVED}",
        f"--id-column is the old name of --id-field; {REMOVED}",
    ]
    parser = build_options_parser(pairs.Options, "sbert pairs")
    assert "--id-column" in parser.actions and "--id-column" not in parser.flags
    assert "--id-column" not in parser.format_help(everything=True)


def test_old_values_from_python_yaml_and_the_command_line(caplog):
    assert Toy(stable_keep="off", mode="old").stable_keep is False
    assert said(caplog) == [
        f"stable_keep='off' is the old spelling of stable_keep=False; {REMOVED}",
        f"mode='old' is the old spelling of mode='new'; {REMOVED}",
    ]
    assert options_from_mapping(Toy, {"stable_keep": "on"}, "toy").stable_keep is True
    assert (
        said(caplog)[-1]
        == f"toy.stable_keep: on is the old spelling of toy.stable_keep: true; {REMOVED}"
    )
    cli = parse_options(Toy, ["--stable-keep", "auto", "--mode", "old", "--fast"], "sbert toy")
    assert (cli.stable_keep, cli.mode, cli.quick) == (None, "new", True)
    assert f"--stable-keep auto is the old spelling of leaving out --stable-keep; {REMOVED}" in (
        said(caplog)
    )
    assert f"--fast is the old name of --quick; {REMOVED}" in said(caplog)


def test_an_old_value_may_set_several_fields(caplog):
    built = parse_options(Toy, ["--known-field", "none"], "sbert toy")
    assert (built.known_field, built.known) == (None, False)
    assert said(caplog) == [
        "--known-field none is the old spelling of leaving out --known-field and --no-known; "
        + REMOVED
    ]


def test_a_switch_with_old_values_is_still_a_switch():
    for argv, expected in [
        ([], None),
        (["--stable-keep"], True),
        (["--no-stable-keep"], False),
        (["--stable-keep=on"], True),
    ]:
        assert parse_options(Toy, argv, "sbert toy").stable_keep is expected
    with pytest.raises(SystemExit):
        parse_options(Toy, ["--stable-keep", "maybe"], "sbert toy")
    assert "--[no-]stable-keep " in build_options_parser(Toy, "sbert toy").format_help()


def test_every_switch_has_its_no_form():
    assert (
        parse("pairs", ["--embeddings", "e", "--output", "o", "--no-overwrite"]).overwrite is False
    )
    assert parse("pairs", ["--embeddings", "e", "--output", "o", "--no-verify"]).verify is False
    assert switch_flags(Toy)["--quick"] is None  # off by default: nothing to say
    assert switch_flags(Toy)["--fast"] is None
    assert switch_flags(pairs.Options)["--verify"] == "--no-verify"


def test_a_config_with_old_names_becomes_the_new_flags():
    values = {"embeddings": ["e"], "output": "o", "id-column": "i", "verify": False}
    assert options_flags(pairs.Options, {**values, "incremental": False}) == [
        "--embeddings",
        "e",
        "--output=o",
        "--id-field=i",
        "--no-verify",
    ]
    assert options_flags(Toy, {"stable_keep": "off", "fast": True}) == [
        "--no-stable-keep",
        "--quick",
    ]


def test_finetune_takes_set_and_still_the_bare_overrides(caplog):
    built = parse("finetune", ["--config", "c.yaml", "a.b=1", "--set", "x=2", "--set", "y=3"])
    assert built.overrides == ("a.b=1", "x=2", "y=3")
    assert said(caplog) == [
        f"bare KEY=VALUE arguments (a.b=1) are the old spelling of --set KEY=VALUE; {REMOVED}"
    ]
    assert parse("finetune", ["--set", "training.epochs=1"]).overrides == ("training.epochs=1",)
    assert finetune.Options(overrides=["a=1"]).overrides == ("a=1",)


def test_values_are_converted_before_the_options_are_built():
    """A frozen Options is never written to after __init__."""
    assert "__setattr__" not in inspect.getsource(options_module)
    built = index.Options(embeddings="e", output="o", target_recall=1, beam_options=[])
    assert built.target_recall == 1.0 and isinstance(built.target_recall, float)
    assert built.beam_options == ()
    assert Toy("lbl", True).quick is True  # positional arguments, as before
