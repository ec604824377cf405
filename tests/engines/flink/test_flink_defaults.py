"""``runner: flink`` on the local Flink cluster's record (``$SBERT_FLINK_HOME/run/cluster.env``,
as ``deploy/flink/local-cluster.sh up`` writes it): its master, job server jar (with its Flink
version), worker pool and slots fill what is not given; a set-up that cannot work is refused in
one line naming the Flink script. Nothing here starts Flink or Java."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import FlinkRunnerOptions, PortableOptions
from engine_jobs import record_cluster
from sbert_pipeline.stage_api.beam_options import check_beam_args
from sbert_pipeline.stage_api.beam_run import options_for
from sbert_pipeline.stage_api.portable_settings import (
    FLINK_ENVIRONMENT_CACHE_MILLIS,
    PortableSettingsError,
    cluster_env_path,
)

JAR_NAME = "beam-runners-flink-1.19-job-server-2.62.0.jar"
# Beam would start its job server with this java, which is only looked up here.
pytestmark = pytest.mark.usefixtures("fake_java")


@pytest.fixture(autouse=True)
def homes(tmp_path, monkeypatch) -> dict[str, Path]:
    """Empty Spark and Flink homes (no cluster recorded), so the machine's own never count."""
    homes = {}
    for cluster, variable in (("spark", "SBERT_SPARK_HOME"), ("flink", "SBERT_FLINK_HOME")):
        homes[cluster] = tmp_path / f"{cluster}-home"
        (homes[cluster] / "run").mkdir(parents=True)
        monkeypatch.setenv(variable, str(homes[cluster]))
    return homes


def listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server


@pytest.fixture
def master() -> Iterator[str]:
    """HOST:PORT that accepts connections (the JobManager's REST address)."""
    with listener() as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


@pytest.fixture
def pool() -> Iterator[str]:
    """HOST:PORT that accepts connections (a worker pool)."""
    with listener() as server:
        yield f"localhost:{server.getsockname()[1]}"


@pytest.fixture
def jar(tmp_path) -> Path:
    path = tmp_path / "jars" / JAR_NAME
    path.parent.mkdir()
    path.write_bytes(b"")
    return path


def record_flink(home: Path, master: str, pool: str, jar: Path, slots: int = 2) -> None:
    record_cluster(
        home,
        FLINK_MASTER=master,
        FLINK_VERSION="1.19",
        FLINK_PARALLELISM=str(slots),
        BEAM_WORKER_POOL=pool,
        FLINK_JOB_SERVER_JAR=str(jar),
    )


def refusal(flags: list[str]) -> str:
    with pytest.raises(PortableSettingsError) as raised:
        check_beam_args(flags)
        options_for(flags, None)
    assert "\n" not in str(raised.value)
    return str(raised.value)


def test_the_flink_record_is_read_from_the_flink_home(homes):
    assert cluster_env_path("flink") == homes["flink"] / "run" / "cluster.env"
    assert cluster_env_path() == homes["spark"] / "run" / "cluster.env"


@pytest.mark.parametrize("runner", ["flink", "FlinkRunner"])
def test_flink_takes_its_master_jar_version_pool_and_slots_from_its_record(
    homes, master, pool, jar, runner
):
    record_flink(homes["flink"], master, pool, jar, slots=3)
    check_beam_args(["--runner", runner])
    options = options_for(["--runner", runner], None)
    flink = options.view_as(FlinkRunnerOptions)
    assert (flink.flink_master, flink.flink_job_server_jar) == (master, str(jar))
    assert (flink.flink_version, flink.parallelism) == ("1.19", 3)
    portable = options.view_as(PortableOptions)
    assert (portable.environment_type, portable.environment_config) == ("EXTERNAL", pool)
    # Its TaskManagers outlive the stage: idle SDK workers go after a minute, not ten.
    assert portable.environment_cache_millis == FLINK_ENVIRONMENT_CACHE_MILLIS


def test_given_values_win_over_the_record(homes, master, pool, jar, tmp_path):
    record_flink(homes["flink"], "127.0.0.1:1", "localhost:1", Path("/no/jar"))
    own = tmp_path / "own.jar"
    own.write_bytes(b"")
    flags = [
        *("--runner=flink", f"--flink_master={master}", f"--flink_job_server_jar={own}"),
        *("--environment_type=EXTERNAL", f"--environment_config={pool}"),
    ]
    flink = options_for(flags, None).view_as(FlinkRunnerOptions)
    assert (flink.flink_master, flink.flink_job_server_jar) == (master, str(own))
    # Not the recorded master: its slots say nothing; the jar's Flink is not known.
    assert flink.parallelism == -1 and flink.flink_version != "1.19"
    record_flink(homes["flink"], master, pool, jar)
    flags = ["--runner=flink", "--parallelism=1", "--flink_version=1.20"]
    flink = options_for(flags, None).view_as(FlinkRunnerOptions)
    assert (flink.parallelism, flink.flink_version) == (1, "1.20")


def test_the_flink_pool_comes_before_the_spark_one(homes, master, pool, jar):
    with listener() as spark_pool:
        spark_address = f"localhost:{spark_pool.getsockname()[1]}"
        record_cluster(homes["spark"], BEAM_WORKER_POOL=spark_address)
        record_flink(homes["flink"], master, pool, jar)
        options = options_for(["--runner=flink"], None)
        assert options.view_as(PortableOptions).environment_config == pool
        other = options_for(["--runner=PortableRunner", f"--job_endpoint={master}"], None)
        assert other.view_as(PortableOptions).environment_config == spark_address


def test_a_job_endpoint_takes_no_master_and_no_jar(homes, master, pool, jar):
    record_flink(homes["flink"], "127.0.0.1:1", pool, jar)
    options = options_for(["--runner=flink", f"--job_endpoint={master}"], None)
    flink = options.view_as(FlinkRunnerOptions)
    assert flink.flink_job_server_jar is None and flink.flink_master == "[auto]"


def test_no_pool_recorded_is_refused_naming_the_flink_script():
    line = refusal(["--runner=flink"])
    assert line.startswith("--runner flink: no SDK worker pool")
    assert "`deploy/flink/local-cluster.sh up`" in line


def test_a_flink_master_that_does_not_answer_is_refused(homes, pool, jar, closed):
    record_flink(homes["flink"], closed, pool, jar)
    line = refusal(["--runner=flink"])
    assert line.startswith(f"--flink_master {closed}: nothing answers at {closed}")
    assert "`deploy/flink/local-cluster.sh up`" in line


def test_a_recorded_flink_pool_that_does_not_answer_is_refused(homes, master, jar, closed):
    record_flink(homes["flink"], master, closed, jar)
    line = refusal(["--runner=flink"])
    assert line.startswith(
        f"the SDK worker pool of the local Flink cluster: nothing answers at {closed}"
    )
    assert "`deploy/flink/local-cluster.sh up`" in line


def test_a_recorded_jar_that_is_gone_is_refused_naming_the_fetch(homes, master, pool, tmp_path):
    gone = tmp_path / JAR_NAME
    record_flink(homes["flink"], master, pool, gone)
    line = refusal(["--runner=flink"])
    assert line.startswith(f"--flink_job_server_jar {gone}: no such file")
    assert "`deploy/flink/local-cluster.sh fetch`" in line


def test_flink_without_a_jar_is_refused_before_beam_would_download_one(homes, pool, master):
    flags = [
        *("--runner=flink", f"--flink_master={master}"),
        *("--environment_type=EXTERNAL", f"--environment_config={pool}"),
    ]
    with pytest.raises(PortableSettingsError, match="no Flink job server") as err:
        check_beam_args(flags)
    assert "deploy/flink/local-cluster.sh up" in str(err.value) and "\n" not in str(err.value)
