"""Beam options: unknown ones are errors with close matches; DirectRunner runs as FnApiRunner."""

from __future__ import annotations

import logging

import pytest
from apache_beam.options.pipeline_options import StandardOptions

from jobs.cli import main
from pipelines.stage_api.beam_options import (
    LOCAL_RUNNER,
    UnknownOptionError,
    check_beam_args,
    pipeline_options,
)


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
    with caplog.at_level(logging.INFO, logger="pipelines.stage_api.beam_options"):
        options = pipeline_options(["--runner", "DirectRunner"])
    assert options.view_as(StandardOptions).runner == LOCAL_RUNNER
    records = [r for r in caplog.records if r.name == "pipelines.stage_api.beam_options"]
    assert [r.levelno for r in records] == [logging.WARNING]
    assert "DirectRunner" in records[0].getMessage() and "\n" not in records[0].getMessage()


def test_no_runner_means_the_local_runner_without_a_warning(caplog):
    with caplog.at_level(logging.INFO, logger="pipelines.stage_api.beam_options"):
        options = pipeline_options([])
    assert options.view_as(StandardOptions).runner == LOCAL_RUNNER
    assert not [r for r in caplog.records if r.name == "pipelines.stage_api.beam_options"]


@pytest.mark.parametrize(
    "runner", ["DaskRunner", "apache_beam.runners.dask.dask_runner.DaskRunner"]
)
def test_options_of_a_runner_registered_on_import_are_known(runner):
    check_beam_args(["--runner", runner, "--dask_client_address", "localhost:8786"])
    with pytest.raises(UnknownOptionError, match="did you mean --dask_client_address"):
        check_beam_args(["--runner", runner, "--dask_client_adress", "localhost:8786"])
