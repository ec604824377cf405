"""A job or ``sbert verify`` whose cross-encoder is missing (or no cross-encoder) stops before
anything runs and before its output folder exists, saying what verify needs and how to get it;
a missing local path is never called a Hub id and the bundled bi-encoder is never suggested."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sbert_pipeline.jobs.cli import main as cli_main
from sbert_pipeline.verify import model_check
from sbert_pipeline.verify.model_check import check_cross_encoder, looks_like_a_path

from sbert_core.errors import ModelLoadError

REPO = Path(__file__).resolve().parents[2]
QUICKSTART_VERIFY = REPO / "examples" / "quickstart_verify.yaml"
# What every refusal of verify's model says (the hint).
HINT = (
    "verify needs a cross-encoder folder (a sentence-transformers CrossEncoder folder: a "
    "one-label classification head"
)


def copied_quickstart_verify(root: Path) -> Path:
    """examples/quickstart_verify.yaml with its job folder and corpus made absolute, in
    ``root`` (the working directory of the test, where no cross-encoder was trained)."""
    config = yaml.safe_load(QUICKSTART_VERIFY.read_text(encoding="utf-8"))
    config["job_dir"] = str(root / "job")
    config["input"]["path"] = str(REPO / config["input"]["path"])
    path = root / "quickstart_verify.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def one_error_line(capsys) -> str:
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    return error


def assert_says_how_to_get_one(error: str) -> None:
    assert HINT in error, error
    assert "sbert finetune --config examples/cross_encoder_qqp_quick.yaml" in error, error
    assert "examples/cross_encoder_qqp.yaml" in error, error
    assert "cross-encoder/quora-distilroberta-base" in error, error
    # Never the bundled bi-encoder (verify refuses it), never "pass local_files_only".
    assert "all-MiniLM-L6-v2" not in error and "bundled" not in error, error
    assert "local_files_only" not in error, error


@pytest.mark.parametrize("runs_folder", [False, True])
def test_quickstart_verify_without_the_model_exits_2_before_the_job_folder_exists(
    tmp_path, monkeypatch, capsys, runs_folder
):
    """The issue's acceptance: `sbert run examples/quickstart_verify.yaml` in a fresh clone
    (no runs/minilm-qqp-cross-encoder) exits 2 and the job folder never appears. With a
    runs/ folder there, the name can only be a path: the Hub is not mentioned at all."""
    config = copied_quickstart_verify(tmp_path)
    monkeypatch.chdir(tmp_path)
    if runs_folder:
        (tmp_path / "runs").mkdir()
    assert cli_main(["run", str(config)]) == 2
    error = one_error_line(capsys)
    assert error.startswith("sbert: error: verify: model runs/minilm-qqp-cross-encoder: "), error
    assert "nothing was run or written" in error and "Hub id" not in error, error
    if runs_folder:
        assert ": no such folder. " in error and "Hugging Face Hub cross-encoder" in error
        assert error.count("Hub") == 1, error  # only in the hint
    else:
        assert "no such folder here (and the Hugging Face Hub" in error, error
        assert "cannot be reached" in error, error
    assert_says_how_to_get_one(error)
    assert not (tmp_path / "job").exists()


def test_a_missing_embed_model_stops_the_job_before_the_job_folder_exists(
    tmp_path, monkeypatch, capsys
):
    config = copied_quickstart_verify(tmp_path)
    monkeypatch.chdir(tmp_path)
    text = config.read_text(encoding="utf-8").replace(
        "model: all-MiniLM-L6-v2", "model: ./no-bi-encoder"
    )
    config.write_text(text, encoding="utf-8")
    assert cli_main(["run", str(config)]) == 2
    error = one_error_line(capsys)
    assert "no-bi-encoder" in error and "does not exist" in error, error
    assert not (tmp_path / "job").exists()


def test_sbert_verify_refuses_a_missing_model_before_writing(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["verify", "--pairs", str(tmp_path / "pairs"), "--model", str(tmp_path / "no_model")]
    assert cli_main([*argv, "--output", str(out)]) == 2
    error = one_error_line(capsys)
    assert error.startswith(f"sbert: error: --model {tmp_path / 'no_model'}: no such folder. ")
    assert_says_how_to_get_one(error)
    assert not out.exists()


def test_sbert_verify_refuses_a_bi_encoder_saying_what_it_needs(tmp_path, tiny_st_dir, capsys):
    out = tmp_path / "out"
    argv = ["verify", "--pairs", str(tmp_path / "pairs"), "--model", str(tiny_st_dir)]
    assert cli_main([*argv, "--output", str(out)]) == 2
    error = one_error_line(capsys)
    assert "not a CrossEncoder" in error, error
    assert_says_how_to_get_one(error)
    assert not out.exists()


def test_a_file_is_no_cross_encoder_folder(tmp_path):
    model = tmp_path / "model.safetensors"
    model.write_bytes(b"")
    with pytest.raises(ModelLoadError, match=r"a file, not a folder\. verify needs"):
        check_cross_encoder(str(model))


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("./runs/model", True),
        ("/abs/model", True),
        ("~/model", True),
        ("runs/sub/model", True),
        ("gs://bucket/model", True),
        ("a b", True),
        ("cross-encoder/quora-distilroberta-base", False),
        ("quora-distilroberta-base", False),
    ],
)
def test_which_names_can_only_be_paths(tmp_path, monkeypatch, name, path):
    monkeypatch.chdir(tmp_path)
    assert looks_like_a_path(name) is path


def test_a_hub_shaped_name_whose_first_folder_exists_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not looks_like_a_path("runs/model")
    (tmp_path / "runs").mkdir()
    assert looks_like_a_path("runs/model")


class RepositoryNotFoundError(Exception):
    """Named as huggingface_hub's: the Hub answered that no such model exists."""


def test_a_name_the_hub_does_not_have_is_said_so(tmp_path, monkeypatch):
    def not_on_the_hub(name, organization=None):
        try:
            raise RepositoryNotFoundError(name)
        except RepositoryNotFoundError as err:
            raise ModelLoadError(f"{name}: not fetched") from err

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("sbert_core.model.source.resolve_model_dir", not_on_the_hub)
    with pytest.raises(ModelLoadError) as caught:
        check_cross_encoder("someone/no-such-model")
    message = str(caught.value)
    assert message.startswith(
        "--model someone/no-such-model: no such folder here, nor a public model of that name on "
        "the Hugging Face Hub. "
    )
    assert model_check.HOW_TO_GET_ONE in message
