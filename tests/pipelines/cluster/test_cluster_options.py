"""The cluster stage's typed options (pipelines/cluster/options.py) and its Python entry point."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from planted import gaussian_mixture
from planted_vectors import write_embeddings
from sbert_pipeline import cluster
from sbert_pipeline.stage_api.options import OptionError, options_from_mapping

INPUTS = {"embeddings": ["e"], "output": "o"}


def test_a_list_of_inputs_is_stored_as_a_tuple_and_recorded_as_a_list():
    options = cluster.Options(**INPUTS, k=3)
    assert options.embeddings == ("e",) and options.method == "kmeans"
    assert options.to_dict()["embeddings"] == ["e"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "--k: required with --method kmeans"),
        ({"k": 0}, "--k: must be at least 1, got 0"),
        ({"k": 3, "iterations": 0}, "--iterations: must be at least 1"),
        ({"k": 3, "refine_passes": -1}, "--refine-passes: must be at least 0"),
        ({"k": 3, "sample": 0}, "--sample: must be at least 1"),
        ({"k": 5, "sample": 3}, "--sample: 3 is smaller than --k 5"),
        ({"k": 3, "terms": -1}, "--terms: must be at least 0"),
        ({"k": 3, "representatives": -1}, "--representatives: must be at least 0"),
        ({"k": 3, "precision": "fp16"}, "--precision: expected one of"),
        ({"method": "communities", "k": 3}, "--k: applies to --method kmeans"),
        ({"method": "communities", "threshold": 1.5}, r"--threshold: must be in \[-1, 1\]"),
        ({"method": "communities", "threshold": math.nan}, "--threshold: must be in"),
        ({"method": "communities", "min_size": 0}, "--min-size: must be at least 1"),
        ({"method": "communities", "neighbors": 0}, "--neighbors: must be at least 1"),
        ({"method": "communities", "block_size": 0}, "--block-size: must be at least 1"),
    ],
)
def test_a_bad_value_fails_when_the_options_are_built(values, message):
    with pytest.raises(OptionError, match=message):
        cluster.Options(**INPUTS, **values)


def test_a_method_checks_only_its_own_options():
    # Communities take no --k and ignore the k-means settings; k-means ignores --min-size.
    cluster.Options(**INPUTS, method="communities", iterations=0, sample=0)
    cluster.Options(**INPUTS, k=3, min_size=0)
    # A cosine out of range (NaN included) is refused whatever the method.
    with pytest.raises(OptionError, match=r"--threshold: must be in \[-1, 1\]"):
        cluster.Options(**INPUTS, k=3, threshold=float("nan"))


def test_a_config_section_names_its_key():
    with pytest.raises(ValueError, match=r"^cluster\.k: required with --method kmeans"):
        options_from_mapping(cluster.Options, {"method": "kmeans"}, "cluster", owned=INPUTS)


def test_importing_the_package_loads_no_beam_and_no_numpy():
    code = (
        "import sys; import sbert_pipeline.cluster; "
        "print(sorted({'apache_beam', 'numpy', 'torch', 'faiss'} & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"


def test_run_from_python_returns_the_published_output(tmp_path):
    vectors, _ = gaussian_mixture(120, 3, 8, seed=0)
    source = write_embeddings(tmp_path / "emb", [f"p{i}" for i in range(120)], vectors)
    out = tmp_path / "clusters"
    options = cluster.Options(
        embeddings=[str(source)], output=str(out), method="communities", min_size=5
    )
    result = cluster.run(options)
    assert result.output == str(out) and result.manifest["method"] == "communities"
    assert result.manifest == json.loads((out / "_manifest.json").read_text())
    assert result.line() == result.summary.line() and "clustered 120 embeddings" in result.line()
    assert json.loads((out / "_manifest.json").read_text())["runner"] == "launcher"
