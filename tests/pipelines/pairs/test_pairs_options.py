"""The pairs stage's options: refused when built (before any input is read), the --embeddings
spellings of the command line, and an import that loads none of the search."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sbert_pipeline import pairs
from sbert_pipeline.jobs.stage_cli import parse
from sbert_pipeline.stage_api.options import OptionError, options_from_mapping

ROOT = Path(__file__).resolve().parents[3]
BASE = {"embeddings": ("e",), "output": "o"}


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"k": 0}, "--k: must be at least 1, got 0"),
        ({"threshold": float("nan")}, r"--threshold: must be in \[-1, 1\]"),
        ({"threshold": -1.5}, r"--threshold: must be in \[-1, 1\]"),
        ({"clusters": 0}, "--clusters: must be at least 1"),
        ({"ranges": 0}, "--ranges: must be at least 1"),
        ({"iterations": 0}, "--iterations: must be at least 1"),
        ({"tune_sample": -1}, "--tune-sample: must be at least 0"),
        ({"target_recall": 0.0}, r"--target-recall: must be in \(0, 1\]"),
        ({"tune_sample": 0}, "--tune-sample: 0 leaves nothing to choose --nprobe with"),
        ({"worker_memory": "lots"}, "--worker-memory: cannot read the size 'lots'"),
        ({"method": "nearest"}, "--method: expected one of 'auto', 'exact', 'clustered'"),
        ({"known_pairs": "/nonexistent/known.parquet"}, "--known-pairs: .*: no such file"),
        ({"embeddings": "e"}, "--embeddings: expected a list"),
        ({"embeddings": None}, "--embeddings: required"),
    ],
)
def test_bad_values_are_refused_when_the_options_are_built(values, match):
    with pytest.raises(OptionError, match=match):
        pairs.Options(**{**BASE, **values})


def test_options_of_the_other_method_are_refused_naming_each():
    with pytest.raises(OptionError, match=r"^--nprobe: applies to --method clustered \(as do "):
        pairs.Options(**BASE, method="exact", nprobe=2, shards=3)
    with pytest.raises(OptionError, match="--ranges: applies to --method exact"):
        pairs.Options(**BASE, method="clustered", ranges=2)
    # auto may run either method: both kinds are accepted.
    assert pairs.Options(**BASE, nprobe=2, ranges=2).method == "auto"
    # exact never tunes nprobe, so it needs no tuning queries.
    assert pairs.Options(**BASE, method="exact", tune_sample=0).tune_sample == 0


def test_embeddings_take_several_values_and_repeated_flags():
    argv = ["--embeddings", "a", "b", "--embeddings", "c", "--output", "o", "--runner=Direct"]
    options = parse("pairs", argv)
    assert options.embeddings == ("a", "b", "c")
    assert options.beam_options == ("--runner=Direct",)


def test_a_config_section_is_checked_naming_its_key():
    with pytest.raises(ValueError, match=r"pairs\.k: must be at least 1"):
        options_from_mapping(pairs.Options, {"k": 0}, "pairs", owned=BASE)
    options = options_from_mapping(pairs.Options, {"threshold": 0.9}, "pairs", owned=BASE)
    assert options.to_dict()["embeddings"] == ["e"] and options.threshold == 0.9


def test_the_options_load_no_beam_torch_or_numpy():
    code = (
        "import sys\n"
        "import sbert_pipeline.pairs\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'apache_beam', 'torch', 'numpy'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
