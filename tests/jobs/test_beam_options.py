"""Beam options: unknown ones (and unknown runners) are errors with close matches, found when
the options are built; DirectRunner runs as FnApiRunner."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from sbert_pipeline import embed
from sbert_pipeline.jobs.cli import main
from sbert_pipeline.stage_api.beam_options import (
    LOCAL_RUNNER,
    UnknownOptionError,
    check_beam_args,
    pipeline_options,
)
from sbert_pipeline.stage_api.dask_cluster import DASK_RUNNER
from sbert_pipeline.stage_api.options import OptionError


@pytest.mark.parametrize(
    ("typo", "named"),
    [
        (["--keep-txt"], "unknown option --keep-txt (did you mean --keep-text"),
        (["--direct_num_worker", "2"], "unknown option --direct_num_worker (did you mean "),
        (["--text-feild", "body"], "unknown option --text-feild (did you mean --text-field"),
        (["stray"], "unexpected argument 'stray'"),
    ],
)
def test_sbert_embed_refuses_unknown_options_naming_close_matches(tmp_path, capsys, typo, named):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n")
    out = tmp_path / "out"
    argv = ["embed", "--input", str(corpus), "--output", str(out), *typo]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("sbert: error: ") and named in err
    if typo[0] == "--direct_num_worker":
        assert "--direct_num_workers" in err
    assert not out.exists()


def test_pipeline_options_refuse_what_beam_would_drop():
    with pytest.raises(UnknownOptionError, match=r"--direct_num_worker \(did you mean"):
        pipeline_options(["--direct_num_worker", "2"])


def test_known_beam_options_of_every_runner_pass():
    check_beam_args(
        [
            *("--runner=DataflowRunner", "--project", "p", "--region", "us-central1"),
            *("--experiments=use_runner_v2", "--dataflow_service_options", "x"),
            *("--sdk_container_image", "img", "--number_of_worker_harness_threads", "1"),
            *("--flink_master", "localhost:8081", "--spark_master_url", "spark://h:7077"),
            *("--job_endpoint", "localhost:8099", "--environment_type", "EXTERNAL"),
        ]
    )


def test_direct_runner_is_mapped_with_one_warning(caplog):
    with caplog.at_level(logging.INFO, logger="sbert_pipeline.stage_api.beam_options"):
        options = pipeline_options(["--runner", "DirectRunner"])
    assert options.view_as(StandardOptions).runner == LOCAL_RUNNER
    records = [r for r in caplog.records if r.name == "sbert_pipeline.stage_api.beam_options"]
    assert [r.levelno for r in records] == [logging.WARNING]
    assert "DirectRunner" in records[0].getMessage() and "\n" not in records[0].getMessage()


def test_no_runner_means_the_local_runner_without_a_warning(caplog):
    with caplog.at_level(logging.INFO, logger="sbert_pipeline.stage_api.beam_options"):
        options = pipeline_options([])
    assert options.view_as(StandardOptions).runner == LOCAL_RUNNER
    assert not [r for r in caplog.records if r.name == "sbert_pipeline.stage_api.beam_options"]


def test_options_of_a_runner_registered_on_import_are_known():
    runner = "apache_beam.runners.dask.dask_runner.DaskRunner"
    # (A scheduler's address is also asked for an answer: local[N] is checked without one.)
    check_beam_args(["--runner", runner, "--dask_client_address", "local[2]"])
    with pytest.raises(UnknownOptionError, match="did you mean --dask_client_address"):
        check_beam_args(["--runner", runner, "--dask_client_adress", "localhost:8786"])


@pytest.mark.parametrize(
    ("runner", "named"),
    [
        ("NoSuchRunner", "--runner NoSuchRunner: not a Beam runner; "),
        ("dusk", "did you mean dask?"),
        ("no_such_module.Runner", "--runner no_such_module.Runner: cannot be imported"),
        ("apache_beam.Pipeline", "apache_beam has no runner class Pipeline"),
    ],
)
def test_a_runner_beam_cannot_create_is_refused_when_checked(runner, named):
    with pytest.raises(UnknownOptionError, match=re.escape(named)):
        check_beam_args(["--runner", runner])


# A portable runner (Flink) also needs its SDK workers and a job server named, or a local
# cluster recorded: given here, so that only the runner's name is checked.
@pytest.mark.parametrize(
    ("runner", "more"),
    [
        ("DataflowRunner", []),
        ("dataflow", []),
        ("FlinkRunner", ["--environment_type=LOOPBACK", "--job_endpoint=localhost:8099"]),
        ("DirectRunner", []),
    ],
)
def test_runners_beam_knows_pass_by_any_of_its_names(runner, more):
    check_beam_args(["--runner", runner, *more])


@pytest.mark.parametrize("runner", ["dask", "DaskRunner", DASK_RUNNER])
def test_dask_is_a_short_runner_name_with_its_options(runner):
    # Beam finds its Dask runner only by its class path; the short name is resolved here.
    flags = ["--runner", runner, "--dask_client_address", "local[2]", "--dask_npartitions=3"]
    check_beam_args(flags)
    options = pipeline_options(flags)
    assert options.view_as(StandardOptions).runner == DASK_RUNNER
    with pytest.raises(UnknownOptionError, match="did you mean --dask_client_address"):
        check_beam_args(["--runner", runner, "--dask_client_adress", "local[2]"])


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--dask_client_address", "local[0]"], "write local[N] with N >= 1"),
        (["--dask_client_address", "local[two]"], "write local[N] with N >= 1"),
        (["--dask_scheduler_file", "/no/such/scheduler.json"], "no such file"),
        (
            ["--dask_client_address", "127.0.0.1:9", "--dask_connection_timeout", "1"],
            "--dask_client_address 127.0.0.1:9: no Dask scheduler answered within 1s",
        ),
    ],
)
def test_dask_cluster_settings_are_refused_before_any_output(tmp_path, capsys, flags, named):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n")
    out = tmp_path / "out"
    argv = ["embed", "--input", str(corpus), "--output", str(out), "--runner", "dask", *flags]
    assert main(argv) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1


def test_a_job_names_dask_and_its_cluster_under_beam(tmp_path):
    from sbert_pipeline.jobs.submit import beam_argv

    argv = beam_argv({"beam": {"runner": "dask", "dask_client_address": "local[2]"}})
    assert argv == ["--runner=dask", "--dask_client_address=local[2]"]


def test_an_unknown_runner_fails_before_the_output_is_started(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n")
    out = tmp_path / "out"
    argv = ["embed", "--input", str(corpus), "--output", str(out), "--runner", "NoSuchRunner"]
    assert main(argv) == 2
    assert not out.exists()  # no _STARTED marker left behind
    err = capsys.readouterr().err
    assert "--runner NoSuchRunner: not a Beam runner" in err and err.count("\n") == 1


def test_python_api_beam_options_are_checked_when_the_options_are_built(tmp_path):
    given = {"input": str(tmp_path / "*.txt"), "output": str(tmp_path / "out")}
    with pytest.raises(
        OptionError, match=re.escape("pass a list such as ['--direct_num_workers=2']")
    ):
        embed.Options(**given, beam_options="--direct_num_workers=2")
    with pytest.raises(OptionError, match="--beam-options: expected a list of flags"):
        embed.Options(**given, beam_options=[2])
    with pytest.raises(UnknownOptionError, match="did you mean --direct_num_workers"):
        embed.Options(**given, beam_options=["--direct_num_worker=2"])
    with pytest.raises(UnknownOptionError, match="--runner NoSuchRunner"):
        embed.Options(**given, beam_options=PipelineOptions(["--runner", "NoSuchRunner"]))
    options = embed.Options(**given, beam_options=["--direct_num_workers=2"])
    assert options.beam_options == ("--direct_num_workers=2",)
    assert not (tmp_path / "out").exists()


def test_building_options_without_beam_options_loads_no_beam():
    code = (
        "import sys\n"
        "from sbert_pipeline import pairs\n"
        "pairs.Options(embeddings=['e'], output='o', beam_options=())\n"
        "assert 'apache_beam' not in sys.modules, sorted(sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
