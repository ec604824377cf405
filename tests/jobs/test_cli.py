import argparse
import importlib
import importlib.util
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.jobs import stage_cli
from sbert_pipeline.jobs.cli import (
    JOB_COMMANDS,
    VERBOSE_FLAGS,
    build_parser,
    main,
    split_global_flags,
)
from sbert_pipeline.stage_api.model_options import COMPUTE_DTYPE_CHOICES, POOLING_CHOICES
from sbert_pipeline.stage_api.old_spellings import forget_said


@pytest.fixture
def corpus_tsv(tmp_path, sample_texts):
    path = tmp_path / "corpus.tsv"
    lines = ["id\ttext"] + [f"doc-{i}\t{text}" for i, text in enumerate(sample_texts)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_encode_to_npy(tmp_path, corpus_tsv, tiny_st_dir, tiny_encoder, sample_texts, capsys):
    out = tmp_path / "vectors.npy"
    assert (
        main(
            [
                "encode",
                "--model",
                str(tiny_st_dir),
                "--input",
                str(corpus_tsv),
                "--output",
                str(out),
            ]
        )
        == 0
    )
    vectors = np.load(out)
    assert np.abs(vectors - tiny_encoder.encode(sample_texts)).max() <= 1e-6
    assert f"encoded {len(sample_texts)} texts" in capsys.readouterr().out


def test_encode_to_parquet_with_ids_and_text(
    tmp_path, corpus_tsv, tiny_st_dir, tiny_encoder, sample_texts
):
    out = tmp_path / "vectors.parquet"
    argv = [
        "encode",
        "--model",
        str(tiny_st_dir),
        "--input",
        str(corpus_tsv),
        "--output",
        str(out),
        "--id-col",
        "id",
        "--keep-text",
        "--no-normalize",
    ]
    assert main(argv) == 0
    table = pq.read_table(out)
    assert table.column("id").to_pylist() == [f"doc-{i}" for i in range(len(sample_texts))]
    assert table.column("text").to_pylist() == sample_texts
    assert str(table.schema.field("embedding").type) == "fixed_size_list<element: float>[32]"
    vectors = np.asarray(table.column("embedding").to_pylist(), dtype=np.float32)
    expected = tiny_encoder.encode(sample_texts, normalize=False)
    assert np.abs(vectors - expected).max() <= 1e-6
    assert (
        sum(table.column("truncated").to_pylist())
        == tiny_encoder.encode_detailed(sample_texts).n_truncated
    )


def test_encode_refuses_existing_output(tmp_path, corpus_tsv, tiny_st_dir, capsys):
    out = tmp_path / "vectors.npy"
    out.write_bytes(b"keep")
    assert (
        main(
            [
                "encode",
                "--model",
                str(tiny_st_dir),
                "--input",
                str(corpus_tsv),
                "--output",
                str(out),
            ]
        )
        == 2
    )
    assert "--overwrite" in capsys.readouterr().err
    assert out.read_bytes() == b"keep"


def test_eval_sts_json(tmp_path, tiny_st_dir, capsys):
    path = tmp_path / "pairs.tsv"
    rows = ["score\tsentence1\tsentence2", "5\ta man\ta man", "0\tsky\tthe dog", "2\tcar\tred car"]
    path.write_text("\n".join(rows) + "\n")
    assert main(["eval", "sts", "--model", str(tiny_st_dir), "--data", str(path), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["n_pairs"] == 3
    assert set(metrics) >= {
        "cosine_spearman",
        "manhattan_pearson",
        "euclidean_spearman",
        "dot_pearson",
    }


def test_user_errors_are_one_line(tmp_path, tiny_st_dir, capsys):
    path = tmp_path / "pairs.tsv"
    path.write_text("score\tsentence1\tsentence2\nx\ta\tb\n")
    assert main(["eval", "sts", "--model", str(tiny_st_dir), "--data", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sbert: error:") and "row 1, column 'score'" in err
    assert "Traceback" not in err


# --- the command line as a whole ---

ROOT = Path(__file__).resolve().parents[2]
HELP_COMMANDS = [
    [],
    *([name] for name in JOB_COMMANDS),
    ["encode"],
    ["eval"],
    ["eval", "sts"],
    ["eval", "pairs"],
]


def help_text(command: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_help_loads_no_torch_and_no_beam():
    """Every --help answers from the light parsers: torch, Beam, scipy and faiss stay unloaded."""
    code = (
        "import sys\n"
        "from sbert_pipeline.jobs.cli import main\n"
        f"for command in {HELP_COMMANDS!r}:\n"
        "    try:\n"
        "        main([*command, '--help'])\n"
        "    except SystemExit as stop:\n"
        "        assert stop.code == 0, command\n"
        "heavy = ('torch', 'apache_beam', 'scipy', 'faiss', 'transformers')\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert result.stdout.splitlines()[-1] == "[]"


# The topic pages of docs/ the help points to, written with them (checked once they exist).
DOCS_WRITTEN = (ROOT / "docs" / "commands.md").exists()


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=lambda c: " ".join(c) or "sbert")
def test_help_is_plain_text_citing_files_of_the_repo(command, capsys):
    text = help_text(command, capsys)
    assert "``" not in text and not re.search(r":(func|class|mod|meth):`", text)
    assert "DESIGN.md" not in text
    for path in re.findall(r"[\w.-]+(?:/[\w.-]+)+\.(?:py|md|yaml)\b", text):
        if path.startswith("docs/") and not DOCS_WRITTEN:
            continue
        assert (ROOT / path).exists(), path


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["embed"], "records per inference call, min (default: 4096)"),
        (["pairs"], "k-means iterations, at most (default: 20)"),
        (["cluster"], "communities: minimum cosine to the centre (default: 0.75)"),
        (["index"], "vectors read and added per step (default: 16384)"),
        (["dedup"], "highest sweep threshold (default: 0.99)"),
        (["encode"], "column holding the text (default: text)"),
        (["pairs"], "--[no-]verify check the input folders' files"),
        (["eval", "sts"], "column with the gold score (default: score)"),
    ],
)
def test_help_shows_defaults(command, shown, capsys):
    """A stage's seldom-used options are listed by --help-all, with their defaults too."""
    with pytest.raises(SystemExit):
        main([*command, "--help-all" if stage_cli.is_stage_command(command[0]) else "--help"])
    assert shown in " ".join(capsys.readouterr().out.split())


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, by command."""
    found = {
        name: stage_cli.build_parser(name)
        if stage_cli.is_stage_command(name)
        else importlib.import_module(f"sbert_pipeline.jobs.parsers.{name}").build_parser()
        for name in JOB_COMMANDS
    }
    top = build_parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    found["encode"] = commands.choices["encode"]
    evaluations = commands.choices["eval"]._actions[-1]
    found.update({f"eval {name}": parser for name, parser in evaluations.choices.items()})
    return found


def test_option_names_mean_the_same_in_every_command():
    """--compute-dtype is the compute dtype wherever a model is loaded from options; a visible
    --dtype is always a stored dtype; corpus columns are --text-field and --id-field."""
    for name, parser in parsers().items():
        visible = {
            option: action
            for action in parser._actions
            if action.help != argparse.SUPPRESS
            for option in action.option_strings
        }
        if "--pooling" in visible:
            assert visible["--compute-dtype"].dest == "compute_dtype", name
        if "--dtype" in visible:
            assert visible["--dtype"].dest == "dtype", name
            assert set(visible["--dtype"].choices) <= {"float32", "float16"}, name
        assert not {"--text-col", "--id-col"} & set(visible), name
    for name in ("embed", "encode", "dedup"):
        parser = parsers()[name]
        flags = {flag for action in parser._actions for flag in action.option_strings}
        assert {"--text-field", "--id-field"} <= flags, name


def test_old_encode_spellings_still_work_with_a_warning(
    tmp_path, corpus_tsv, tiny_st_dir, tiny_encoder, sample_texts, caplog
):
    forget_said()
    out = tmp_path / "vectors.parquet"
    argv = ["encode", "--model", str(tiny_st_dir), "--input", str(corpus_tsv)]
    argv += ["--output", str(out), "--text-col", "text", "--id-col", "id", "--dtype", "float32"]
    assert main(argv) == 0
    for old, new in [
        ("--text-col", "--text-field"),
        ("--id-col", "--id-field"),
        ("--dtype", "--compute-dtype"),
    ]:
        line = f"{old} is the old name of {new}; it will be removed in the next version"
        assert line in caplog.messages
    assert pq.read_table(out).column("id").to_pylist()[:2] == ["doc-0", "doc-1"]


def test_light_copies_of_core_choices_agree():
    from sbert_pipeline.jobs.parsers.run import STAGE_ORDER
    from sbert_pipeline.jobs.run_table import STAGE_NAMES

    from sbert_core.inference.precision import DTYPE_NAMES
    from sbert_core.model.pooling import POOLING_MODES

    assert POOLING_CHOICES == POOLING_MODES
    assert COMPUTE_DTYPE_CHOICES == DTYPE_NAMES
    assert STAGE_ORDER == STAGE_NAMES


@pytest.mark.parametrize("flag", ["-v", "--verbose", "-q", "--quiet"])
@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_and_quiet_work_before_and_after_the_command(flag, where, tmp_path, capsys):
    args = ["search", "--index", str(tmp_path / "no-index"), "hello"]
    argv = [flag, *args] if where == "before" else [*args, flag]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sbert: error:") and "no-index" in err
    assert "unrecognized" not in err
    level = logging.INFO if flag in VERBOSE_FLAGS else logging.ERROR
    assert split_global_flags(argv)[0] == level


def test_global_flags_after_a_double_dash_are_left_alone():
    assert split_global_flags(["run", "job.yaml", "--", "-q"]) == (
        logging.WARNING,
        ["run", "job.yaml", "--", "-q"],
    )


def test_a_misspelled_option_of_a_command_without_beam_names_the_right_one(tmp_path, capsys):
    argv = ["dedup", "--pairs", str(tmp_path), "--threshold", "0.9", "--dry-runn"]
    assert main(argv) == 2
    assert "unknown option --dry-runn (did you mean --dry-run?)" in capsys.readouterr().err


@pytest.mark.skipif(
    importlib.util.find_spec("apitools") is not None, reason="Beam's BigQuery client is complete"
)
def test_no_line_about_beams_bigquery_client(tmp_path):
    """Beam warns at import that its BigQuery client lacks apitools; sbert never shows it, in
    --help or in a command that loads Beam."""
    beam = [sys.executable, "-c", "import apache_beam"]
    said = subprocess.run(beam, capture_output=True, text=True, cwd=tmp_path).stderr
    assert "apitools not found" in said  # what the test looks for, without the package
    sbert = [sys.executable, "-m", "sbert_pipeline.jobs.cli"]
    loads_beam = [*sbert, "search", "--index", str(tmp_path / "no-index"), "hello"]
    for command in ([*sbert, "--help"], loads_beam, [*loads_beam, "-v"]):
        result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        assert result.returncode in (0, 2), result.stderr
        assert "apitools" not in result.stdout + result.stderr
        assert "sbert" in result.stdout + result.stderr  # it ran: help or the one-line error


def test_beam_job_server_start_and_stop_lines_are_shown_only_with_v():
    from sbert_pipeline.jobs.cli import _not_beam_noise

    def record(name: str, message: str) -> logging.LogRecord:
        return logging.LogRecord(name, logging.WARNING, __file__, 1, message, ("x", "y"), None)

    beam = "apache_beam.utils.subprocess_server"
    assert not _not_beam_noise(record(beam, "Really starting service at %s with cmd: %s"))
    assert not _not_beam_noise(record(beam, "Really destroying service at %s with cmd: %s"))
    # Its other warnings, and everyone else's, stay.
    assert _not_beam_noise(record(beam, "Port %s not free"))
    assert _not_beam_noise(record("sbert_pipeline.stage_api.portable_settings", "versions %s %s"))
