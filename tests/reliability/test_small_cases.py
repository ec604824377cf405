"""Item 8 of issue 13: NaN in range checks, YAML alias bombs, formula cells in search TSV."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from sbert_pipeline.grouping.sweep import sweep_thresholds
from sbert_pipeline.io.corpus_reader import CorpusSpec
from sbert_pipeline.jobs.run_config import load_run_config
from sbert_pipeline.search.hits import Hit, QueryHits, SearchSummary, spreadsheet_safe
from sbert_pipeline.stage_api.options import in_range

FLOAT_RANGES = [
    "embed.max_error_rate",
    "index.target_recall",
    "cluster.threshold",
    "pairs.threshold",
    "dedup.threshold",
]


@pytest.fixture
def job_config(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput: {{path: {tmp_path / 'c.jsonl'}}}\ncluster: {{k: 3}}\n"
    )
    return path


@pytest.mark.parametrize("key", FLOAT_RANGES)
@pytest.mark.parametrize("value", [".nan", ".NaN"])
def test_nan_is_in_no_config_range(job_config, key, value):
    with pytest.raises(ValueError, match=rf"{key}: must be in .*got nan"):
        load_run_config(job_config, [f"{key}={value}"])


def test_the_range_helper_refuses_nan_and_keeps_its_bounds():
    in_range("x", 1.0, 0.0, 1.0)
    in_range("x", 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"--x: must be in \(0, 1\], got 0.0"):
        in_range("x", 0.0, 0.0, 1.0, low_open=True)
    for bad in (float("nan"), float("inf"), -1e-9):
        with pytest.raises(ValueError, match="--x: must be in"):
            in_range("x", bad, 0.0, 1.0)


def test_a_nan_sweep_step_is_refused_by_name():
    with pytest.raises(ValueError, match="step > 0"):
        sweep_thresholds(0.8, 0.99, float("nan"))


def test_record_limits_must_be_positive():
    with pytest.raises(ValueError, match="--max-record-lines must be at least 1"):
        CorpusSpec(max_record_lines=0)
    with pytest.raises(ValueError, match="--on-bad-file must be one of fail, skip"):
        CorpusSpec(on_bad_file="ignore")


def _laughs(levels: int, indent: str = "") -> str:
    """The "billion laughs" YAML: each level lists the one before nine times."""
    lines = [f'{indent}l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        refs = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"{indent}l{level}: &l{level} [{refs}]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path, job_config):
    bomb = tmp_path / "bomb.yaml"
    # Under a stage's free-form options, where no key check stops it early (9^6 values).
    bomb.write_text(job_config.read_text() + "embed:\n  options:\n" + _laughs(6, "    "))
    with pytest.raises(ValueError, match=r"bomb.yaml: line 7: YAML aliases \(\*l0\) are not"):
        load_run_config(bomb)


def test_an_alias_in_a_set_value_is_refused(job_config):
    with pytest.raises(ValueError, match=r"--set embed.options=.*YAML aliases \(\*a\)"):
        load_run_config(job_config, ["embed.options={x: &a [1, 2], y: *a}"])


def test_search_tsv_neutralises_formula_cells():
    hits = (
        Hit(1, '=HYPERLINK("http://evil")', -0.25, "+SUM(A1:A9)"),
        Hit(2, "@cmd", 0.5, "-2+3"),
        Hit(3, "plain-id", 0.1, "a plain text"),
    )
    summary = SearchSummary("idx", "ip", 3, (QueryHits("=1+1 query", hits),), "h.tsv", 0.0)
    rows = list(csv.reader(io.StringIO(summary.to_tsv()), delimiter="\t"))
    assert rows[0] == ["query_index", "query", "rank", "id", "score", "text"]
    assert rows[1] == [
        "0",
        "'=1+1 query",
        "1",
        '\'=HYPERLINK("http://evil")',
        "-0.250000",
        "'+SUM(A1:A9)",
    ]
    assert rows[2][3:] == ["'@cmd", "0.500000", "'-2+3"]
    assert rows[3][3:] == ["plain-id", "0.100000", "a plain text"]


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_every_formula_start_gets_a_quote(start):
    assert spreadsheet_safe(start + "x") == "'" + start + "x"
    assert spreadsheet_safe("x" + start) == "x" + start
