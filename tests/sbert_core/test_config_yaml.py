"""The one YAML loader of configs (sbert_core/config.py): aliases refused, ``--set`` values read
by one rule. Finetune configs, ``sbert run`` and ``sbert submit`` all load through it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sbert_pipeline.finetune.config import FinetuneConfig

from sbert_core.config import load_config, override_value, parse_override


def laughs(levels: int) -> str:
    """The "billion laughs" YAML: each level lists the one before nine times (9^levels)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_a_finetune_config_with_an_alias_bomb_is_refused_naming_the_file(tmp_path: Path):
    bomb = tmp_path / "finetune.yaml"
    # 9^9 values once expanded: only a refusal before any walk over them returns at all.
    bomb.write_text("model: all-MiniLM-L6-v2\n" + laughs(9), encoding="utf-8")
    with pytest.raises(ValueError, match=r"finetune.yaml: line 3: YAML aliases \(\*l0\)") as err:
        load_config(FinetuneConfig, bomb)
    assert "\n" not in str(err.value)


def test_an_alias_in_a_finetune_override_is_refused(tmp_path: Path):
    with pytest.raises(ValueError, match=r"YAML aliases \(\*a\)"):
        load_config(FinetuneConfig, None, ["training={x: &a [1, 2], y: *a}"])


@dataclass
class Typed:
    rate: float = 0.0
    steps: int = 0
    name: str = ""
    tags: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)


def test_set_values_keep_their_text_and_typed_fields_convert_it():
    config = load_config(
        Typed, None, ["rate=1.20", "steps=007", "name=1.20", "tags=[a, b]", "extra.n=2"]
    )
    assert config == Typed(rate=1.2, steps=7, name="1.20", tags=["a", "b"], extra={"n": 2})
    assert math.isnan(load_config(Typed, None, ["rate=.nan"]).rate)  # YAML's spelling


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("2", 2),
        ("0.95", 0.95),
        ("1.20", "1.20"),
        ("007", "007"),
        ("2026-12-01", "2026-12-01"),
        ("true", True),
        ("null", None),
        ("[a, 1]", ["a", 1]),
        ("{k: v}", {"k": "v"}),
        ("plain text", "plain text"),
        ('"/tmp/a b/model"', "/tmp/a b/model"),  # what `sbert finetune --output` passes
        ("'1.20'", "1.20"),
        ("", ""),
    ],
)
def test_override_value_rule(raw, value):
    assert override_value(raw) == value


def test_parse_override_names_the_malformed_one():
    assert parse_override("a.b.0=x") == (["a", "b", "0"], "x")
    with pytest.raises(ValueError, match=r"^--set x: override 'x' is not of the form key=value"):
        parse_override("x", "--set x: ")
    with pytest.raises(ValueError, match=r"invalid YAML/JSON"):
        parse_override("a=[unclosed")
