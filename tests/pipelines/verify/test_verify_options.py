"""The verify stage's options: refused when built (before any input is read), the --band flag
of the command line, the config section, and an import that loads no model or Beam."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sbert_pipeline import verify
from sbert_pipeline.jobs.stage_cli import parse, stage_commands
from sbert_pipeline.stage_api.options import OptionError, options_from_mapping

ROOT = Path(__file__).resolve().parents[3]
BASE = {"pairs": "p", "model": "m", "output": "o"}


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"band": (0.9, 0.5)}, r"^--band: LOW 0\.9 is above HIGH 0\.5$"),
        ({"band": (0.5, 1.5)}, r"^--band: must be in \[-1, 1\], got 1\.5$"),
        ({"band": (-1.2, 0.5)}, r"^--band: must be in \[-1, 1\], got -1\.2$"),
        ({"band": (float("nan"), 0.5)}, r"^--band: must be in \[-1, 1\], got nan$"),
        ({"band": (0.5,)}, r"^--band: give two cosines, LOW and HIGH, got \[0\.5\]$"),
        ({"band": 0.5}, "--band: expected a list of numbers"),
        ({"batch_size": 0}, "--batch-size: must be at least 1, got 0"),
        ({"threads": 0}, "--threads: must be at least 1, got 0"),
        ({"max_length": 0}, "--max-length: must be at least 1, got 0"),
        ({"compute_dtype": "float8"}, "--compute-dtype: expected one of"),
        ({"model": None}, "--model: required"),
        ({"pairs": None}, "--pairs: required"),
        ({"id_field": "id"}, r"^--id-field: says how the corpus is read; give --corpus GLOB"),
        ({"text_field": "t"}, r"^--text-field: says how the corpus is read; give --corpus"),
        ({"corpus": "c", "format": "xml"}, r"^--format: must be one of"),
    ],
)
def test_bad_values_are_refused_when_the_options_are_built(values, match):
    with pytest.raises(OptionError, match=match):
        verify.Options(**{**BASE, **values})


def test_band_edges_default_to_every_pair_and_may_be_equal():
    assert verify.Options(**BASE).band_edges() is None
    assert verify.Options(**BASE, band=(0.7, 0.7)).band_edges() == (0.7, 0.7)
    assert verify.Options(**BASE, band=[-1, 1]).band_edges() == (-1.0, 1.0)


def test_the_command_line_takes_the_band_as_two_values_and_passes_beam_flags():
    argv = ["--pairs", "p", "--model", "m", "--output", "o", "--band", "0.6", "0.95"]
    options = parse("verify", [*argv, "--runner=Direct"])
    assert options.band == (0.6, 0.95) and options.beam_options == ("--runner=Direct",)
    assert parse("verify", argv[:6]).band is None
    with pytest.raises(SystemExit):
        parse("verify", [*argv[:6], "--band", "0.6"])


def test_a_config_section_is_checked_naming_its_key():
    owned = {"pairs": "p", "output": "o"}
    with pytest.raises(ValueError, match=r"^verify\.band: LOW 0\.9 is above HIGH 0\.5$"):
        options_from_mapping(
            verify.Options, {"model": "m", "band": [0.9, 0.5]}, "verify", owned=owned
        )
    with pytest.raises(ValueError, match=r"verify\.model: required"):
        options_from_mapping(verify.Options, {}, "verify", owned=owned)
    options = options_from_mapping(
        verify.Options, {"model": "m", "band": [0.5, 0.9], "batch-size": 8}, "verify", owned=owned
    )
    assert options.to_dict()["band"] == [0.5, 0.9] and options.batch_size == 8


def test_sbert_help_lists_the_command():
    assert stage_commands()["verify"] == verify.SUMMARY


def test_the_options_load_no_beam_torch_or_numpy():
    code = (
        "import sys\n"
        "import sbert_pipeline.verify\n"
        "from sbert_pipeline.jobs.stage_cli import build_parser\n"
        "build_parser('verify').format_help()\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'apache_beam', 'torch', 'numpy'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
