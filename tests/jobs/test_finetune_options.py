"""The finetune stage's typed API: ``finetune.Options`` checks, how its values override the
config, ``--print-config`` as a run that trains nothing, and the ``Result`` of a run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sbert_pipeline import finetune
from sbert_pipeline.finetune.config import resolve_config
from sbert_pipeline.finetune.finetune_summary import FinetuneSummary, PrintedConfig
from sbert_pipeline.stage_api.options import OptionError
from training_examples import build_trainable_model, scored_pairs, write_tsv

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("keep_torch_threads")


@pytest.fixture
def config_file(tmp_path):
    train = write_tsv(tmp_path / "train.tsv", ("sentence1", "sentence2", "score"), scored_pairs(16))
    path = tmp_path / "train.yaml"
    output = str(tmp_path / "from-config")
    config = {"output": output, "overwrite": True, "train": {"path": str(train)}}
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_malformed_override_or_an_empty_name_fails_when_options_are_built():
    with pytest.raises(OptionError, match="--overrides: override 'epochs' is not of the form"):
        finetune.Options(overrides=("training.epochs=2", "epochs"))
    with pytest.raises(OptionError, match="--output: must not be empty"):
        finetune.Options(output="")
    with pytest.raises(OptionError, match="--resume: expected true or false or null"):
        finetune.Options(resume="yes")


def test_options_override_the_config_only_where_given(config_file, tmp_path):
    resolved = resolve_config(finetune.Options(config=str(config_file)))
    assert resolved.overwrite is True and resolved.training.resume is True
    assert resolved.output == str(tmp_path / "from-config")
    given = finetune.Options(
        config=str(config_file),
        overrides=("training.epochs=3", "output=x"),
        output=str(tmp_path / "flag"),
        overwrite=False,
        resume=False,
    )
    resolved = resolve_config(given)
    assert resolved.overwrite is False and resolved.training.resume is False
    assert resolved.training.epochs == 3 and resolved.output == str(tmp_path / "flag")
    assert resolved.training.checkpoint_dir == f"{tmp_path / 'flag'}.checkpoints"


@pytest.mark.parametrize("where", ["the data's folder", "the data file", "inside the model"])
def test_an_output_over_the_data_or_the_model_named_by_the_config_is_refused(
    config_file, tmp_path, where
):
    model = tmp_path / "base"
    model.mkdir()
    output = {
        "the data's folder": tmp_path,
        "the data file": tmp_path / "train.tsv",
        "inside the model": model / "tuned",
    }[where]
    # Set in the config (an override), which the options themselves do not see.
    options = finetune.Options(
        config=str(config_file), model=str(model), overrides=(f"output={output}",)
    )
    with pytest.raises(ValueError, match=r"^output: .* (train\.path|model) "):
        resolve_config(options)
    assert not (model / "tuned").exists()


def test_print_config_trains_nothing_and_its_line_is_the_yaml(config_file, tmp_path):
    result = finetune.run(finetune.Options(config=str(config_file), print_config=True))
    assert isinstance(result.summary, PrintedConfig) and result.manifest == {}
    assert yaml.safe_load(result.line()) == result.summary.config
    assert result.summary.config["output"] == result.output == str(tmp_path / "from-config")
    assert not (tmp_path / "from-config").exists()


def test_a_run_returns_the_published_manifest(config_file, tmp_path):
    model = build_trainable_model(tmp_path / "base")
    options = finetune.Options(
        config=str(config_file),
        model=str(model),
        overrides=("training.device=cpu", "training.num_threads=1", "training.batch_size=8"),
    )
    result = finetune.run(options, pipeline=None)
    output = tmp_path / "from-config"
    assert result.output == str(output) and result.summary.steps == 2
    assert result.manifest == json.loads((output / "sbert_manifest.json").read_text())
    assert result.line() == result.summary.line() and result.line().endswith(str(output))


def test_only_the_first_process_reports():
    summary = FinetuneSummary("out", 6, 1.0, 48.0, None, None, {}, None, main_process=False)
    assert summary.line() == ""


def test_importing_the_package_loads_no_torch_or_beam():
    code = (
        "import sys, sbert_pipeline.finetune\n"
        "loaded = [m for m in ('torch', 'apache_beam', 'numpy') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
