"""A portable runner's defaults: the local cluster's SDK worker pool (EXTERNAL, never LOOPBACK
unasked), its job server jar for Spark, SDK workers kept for the job; explicit values win."""

from __future__ import annotations

import logging

import pytest
from apache_beam.options.pipeline_options import (
    PipelineOptions,
    PortableOptions,
    SparkRunnerOptions,
)
from engine_jobs import record_cluster
from sbert_pipeline.stage_api.beam_options import check_beam_args, pipeline_options
from sbert_pipeline.stage_api.beam_run import options_for
from sbert_pipeline.stage_api.portable_settings import (
    ENVIRONMENT_CACHE_MILLIS,
    FLINK_ENVIRONMENT_CACHE_MILLIS,
    PortableSettingsError,
    cluster_env_path,
    jar_version,
    portable_kind,
)


@pytest.mark.parametrize(
    ("runner", "kind"),
    [
        ("spark", "spark"),
        ("SparkRunner", "spark"),
        ("apache_beam.runners.portability.spark_runner.SparkRunner", "spark"),
        ("flink", "flink"),
        ("FlinkRunner", "flink"),
        ("PortableRunner", "portable"),
        ("DataflowRunner", None),
        ("FnApiRunner", None),
        ("PrismRunner", None),
        (None, None),
    ],
)
def test_the_portable_runners_are_known_by_every_name(runner, kind):
    assert portable_kind(runner) == kind


def test_the_record_is_read_from_the_spark_home(spark_home):
    assert cluster_env_path() == spark_home / "run" / "cluster.env"


def test_spark_gets_the_local_cluster_s_pool_jar_and_cached_workers(
    spark_home, fake_java, listening, jar
):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar))
    flags = ["--runner=spark", f"--spark_master_url=spark://{listening}"]
    check_beam_args(flags)
    for options in (pipeline_options(flags), options_for(flags, None)):
        portable = options.view_as(PortableOptions)
        assert portable.environment_type == "EXTERNAL"
        assert portable.environment_config == listening
        assert portable.environment_cache_millis == ENVIRONMENT_CACHE_MILLIS
        assert options.view_as(SparkRunnerOptions).spark_job_server_jar == str(jar)


def test_the_defaults_fill_a_copy_of_given_pipeline_options(spark_home, fake_java, listening, jar):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar))
    given = PipelineOptions(["--runner=SparkRunner", f"--spark_master_url=spark://{listening}"])
    options = options_for(given, None)
    assert options.view_as(PortableOptions).environment_config == listening
    assert given.view_as(PortableOptions).environment_type is None  # the caller's is unchanged


def test_explicit_values_win_over_the_defaults(spark_home, fake_java, listening, jar, tmp_path):
    record_cluster(spark_home, BEAM_WORKER_POOL="localhost:1", SPARK_JOB_SERVER_JAR="/no/jar")
    own_jar = tmp_path / "job-server.jar"
    own_jar.write_bytes(b"")
    flags = [
        *("--runner=spark", f"--spark_master_url=spark://{listening}"),
        *("--environment_type=LOOPBACK", "--environment_cache_millis=0"),
        f"--spark_job_server_jar={own_jar}",
    ]
    options = options_for(flags, None)
    portable = options.view_as(PortableOptions)
    assert portable.environment_type == "LOOPBACK"  # asked for: allowed
    assert portable.environment_config is None
    assert int(portable.environment_cache_millis) == 0
    assert options.view_as(SparkRunnerOptions).spark_job_server_jar == str(own_jar)


def test_an_external_environment_keeps_its_own_pool(spark_home, fake_java, listening, jar):
    record_cluster(spark_home, BEAM_WORKER_POOL="localhost:1", SPARK_JOB_SERVER_JAR=str(jar))
    flags = [
        *("--runner=spark", f"--spark_master_url=spark://{listening}"),
        *("--environment_type=EXTERNAL", "--environment_config=executor-side:50000"),
    ]
    options = options_for(flags, None)  # an executor's localhost is not asked from here
    assert options.view_as(PortableOptions).environment_config == "executor-side:50000"


def test_a_job_endpoint_needs_no_jar_and_no_java(spark_home, no_java, listening):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening)
    flags = ["--runner=spark", f"--job_endpoint={listening}"]
    options = options_for(flags, None)
    assert options.view_as(SparkRunnerOptions).spark_job_server_jar is None
    assert options.view_as(PortableOptions).environment_config == listening
    options = options_for(["--runner=PortableRunner", f"--job_endpoint={listening}"], None)
    assert options.view_as(PortableOptions).environment_type == "EXTERNAL"


@pytest.mark.parametrize("runner", ["flink", "FlinkRunner"])
def test_flink_takes_the_same_environment_defaults(spark_home, fake_java, listening, jar, runner):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening)
    flags = ["--runner", runner, "--flink_job_server_jar", str(jar)]
    check_beam_args(flags)
    portable = options_for(flags, None).view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == ("EXTERNAL", listening)
    assert portable.environment_cache_millis == FLINK_ENVIRONMENT_CACHE_MILLIS


def test_other_runners_are_left_as_they_are(spark_home, listening):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening)
    portable = pipeline_options([]).view_as(PortableOptions)
    assert portable.environment_type is None and portable.environment_cache_millis == 0


def test_a_version_mix_is_allowed_and_logged_once_naming_both(
    spark_home, fake_java, listening, jar, caplog
):
    import apache_beam

    assert jar_version(str(jar)) == "2.62.0"
    record_cluster(spark_home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar))
    flags = ["--runner=spark", f"--spark_master_url=spark://{listening}"]
    with caplog.at_level(logging.WARNING):
        check_beam_args(flags)
        options_for(flags, None)
    lines = [r.getMessage() for r in caplog.records if "versions differ" in r.getMessage()]
    assert len(lines) == 1
    assert "2.62.0" in lines[0] and apache_beam.__version__ in lines[0]


def test_a_jar_s_version_is_read_from_its_manifest_when_its_name_has_none(tmp_path):
    import zipfile

    path = tmp_path / "job-server.jar"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            "META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nImplementation-Version: 2.61.0\n"
        )
    assert jar_version(str(path)) == "2.61.0"
    assert jar_version(str(tmp_path / "missing.jar")) is None


def test_no_recorded_pool_is_refused_not_run_loopback(spark_home):
    with pytest.raises(PortableSettingsError, match=r"local-cluster\.sh up") as raised:
        pipeline_options(["--runner=spark"])
    assert "--environment_type" in str(raised.value) and "\n" not in str(raised.value)
