"""Every command's help: generated from its options, short (``--help`` at most 70 lines,
``--help-all`` listing every flag), at a fixed width, and written for users (no module paths,
function names or issue numbers)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sbert_pipeline.jobs import stage_cli
from sbert_pipeline.jobs.cli import JOB_COMMANDS, main
from sbert_pipeline.jobs.options_cli import cli_fields, field_flag

ROOT = Path(__file__).resolve().parents[2]
MAX_HELP_LINES = 70
STAGES = sorted(stage_cli.stage_commands())
OTHER_COMMANDS = [[], ["run"], ["submit"], ["encode"], ["eval"], ["eval", "sts"], ["eval", "pairs"]]
# What a user reads must not cite the code: a module or package path, a function, an issue.
CODE_CITATIONS = re.compile(
    r"sbert_pipeline\.|pipelines/|\w\.py\b|\b\w+\(\)|#\d+|\bissues?\b", re.IGNORECASE
)


def help_of(command: list[str], flag: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, flag])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_help_fits_in_70_lines(stage, capsys):
    text = help_of([stage], "--help", capsys)
    assert len(text.splitlines()) <= MAX_HELP_LINES, text
    assert "--help-all" in text


@pytest.mark.parametrize("command", OTHER_COMMANDS, ids=lambda c: " ".join(c) or "sbert")
def test_every_other_command_help_fits_in_70_lines(command, capsys):
    assert len(help_of(command, "--help", capsys).splitlines()) <= MAX_HELP_LINES


@pytest.mark.parametrize("stage", STAGES)
def test_help_all_lists_every_flag_and_help_the_common_ones(stage, capsys):
    everything = help_of([stage], "--help-all", capsys)
    common = help_of([stage], "--help", capsys)
    options_type = stage_cli.stage_package(stage).Options
    for item in cli_fields(options_type):
        if item.metadata.get("cli", {}).get("positional"):
            continue
        flag = field_flag(item)
        listed = rf"(?:{re.escape(flag)}|--\[no-\]{re.escape(flag[2:])})(?![\w-])"
        shown = re.compile(rf"^ +(?:-\w, )?{listed}", re.MULTILINE)
        assert shown.search(everything), flag
        assert bool(shown.search(common)) != bool(item.metadata.get("advanced")), flag


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_description_is_its_options_docstring_with_a_pointer_to_the_docs(stage, capsys):
    text = help_of([stage], "--help", capsys)
    first_words = " ".join(stage_cli.stage_package(stage).Options.__doc__.split()[:4])
    assert first_words in " ".join(text.split())
    assert f"More: docs/commands.md#{stage}" in text


@pytest.mark.parametrize(
    "command",
    [*([stage] for stage in STAGES), *OTHER_COMMANDS],
    ids=lambda c: " ".join(c) or "sbert",
)
@pytest.mark.parametrize("flag", ["--help", "--help-all"])
def test_no_help_cites_the_code(command, flag, capsys):
    if flag == "--help-all" and not (command and stage_cli.is_stage_command(command[0])):
        return
    text = help_of(command, flag, capsys)
    assert CODE_CITATIONS.findall(text) == []


def test_help_has_the_same_length_whatever_the_terminal():
    def lines(columns: str) -> int:
        environment = {**os.environ, "COLUMNS": columns}
        result = subprocess.run(
            [sys.executable, "-m", "sbert_pipeline.jobs.cli", "pairs", "--help"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=environment,
            check=True,
        )
        return len(result.stdout.splitlines())

    assert lines("60") == lines("100") == lines("200")


def test_every_command_listed_has_a_help():
    assert set(STAGES) <= set(JOB_COMMANDS)
