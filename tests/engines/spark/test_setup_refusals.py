"""A Spark (or other portable) set-up that cannot work is refused in one line that says what to
run, before any output is touched: no pool or jar recorded, no ``java``, a jar gone, a master,
job endpoint or recorded worker pool that does not answer."""

from __future__ import annotations

import re

import pytest
from engine_jobs import record_cluster
from sbert_pipeline import embed
from sbert_pipeline.jobs.cli import main
from sbert_pipeline.stage_api.beam_options import check_beam_args
from sbert_pipeline.stage_api.beam_run import options_for
from sbert_pipeline.stage_api.portable_settings import PortableSettingsError


def refusal(flags: list[str]) -> str:
    """The one line the options are refused with, whether the options check or the run's
    readiness check finds it."""
    with pytest.raises(PortableSettingsError) as raised:
        check_beam_args(flags)
        options_for(flags, None)
    line = str(raised.value)
    assert "\n" not in line
    return line


def test_no_recorded_jar_is_refused_before_beam_would_download_one(
    spark_home, fake_java, listening
):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening)
    line = refusal(["--runner=spark", f"--spark_master_url=spark://{listening}"])
    assert "no Spark job server" in line and "local-cluster.sh up" in line
    assert "--spark_job_server_jar" in line


def test_no_java_is_refused_when_beam_would_start_the_job_server(
    spark_home, no_java, listening, jar
):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar))
    line = refusal(["--runner=spark", f"--spark_master_url=spark://{listening}"])
    assert "no `java` on PATH" in line and "install a Java runtime" in line
    line = refusal(["--runner=flink", "--environment_type=LOOPBACK"])
    assert line.startswith("--runner flink: no `java` on PATH")


def test_a_missing_jar_is_refused_naming_the_fetch(spark_home, fake_java, listening, tmp_path):
    gone = tmp_path / "beam-runners-spark-3-job-server-2.62.0.jar"
    record_cluster(spark_home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(gone))
    line = refusal(["--runner=spark", f"--spark_master_url=spark://{listening}"])
    assert line.startswith(f"--spark_job_server_jar {gone}: no such file")
    assert "local-cluster.sh fetch" in line
    own = ["--runner=spark", f"--spark_job_server_jar={tmp_path / 'own.jar'}"]
    assert "own.jar: no such file" in refusal(own)


def test_a_master_that_does_not_answer_is_refused(spark_home, fake_java, listening, jar, closed):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar))
    check_beam_args(["--runner=spark", f"--spark_master_url=spark://{closed}"])  # no network
    line = refusal(["--runner=spark", f"--spark_master_url=spark://{closed}"])
    assert line.startswith(f"--spark_master_url spark://{closed}: nothing answers at {closed}")
    assert "start the master (`deploy/spark/local-cluster.sh up`" in line
    # A standby master that answers is enough.
    options_for(["--runner=spark", f"--spark_master_url=spark://{closed},{listening}"], None)


def test_a_job_endpoint_that_does_not_answer_is_refused(spark_home, no_java, listening, closed):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening)
    for runner in ("spark", "PortableRunner", "flink"):
        line = refusal([f"--runner={runner}", f"--job_endpoint={closed}"])
        assert line.startswith(f"--job_endpoint: nothing answers at {closed}")
        assert "start the job server" in line


def test_a_recorded_worker_pool_that_does_not_answer_is_refused(
    spark_home, fake_java, listening, jar, closed
):
    record_cluster(spark_home, BEAM_WORKER_POOL=closed, SPARK_JOB_SERVER_JAR=str(jar))
    line = refusal(["--runner=spark", f"--spark_master_url=spark://{listening}"])
    assert line.startswith(
        f"the SDK worker pool of the local Spark cluster: nothing answers at {closed}"
    )
    assert "local-cluster.sh up" in line


def test_a_portable_runner_without_a_job_endpoint_is_refused(spark_home, listening):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening)
    line = refusal(["--runner=PortableRunner"])
    assert line.startswith("--runner PortableRunner: give --job_endpoint HOST:PORT")


def test_an_uber_jar_needs_the_rest_url(spark_home, no_java, listening):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening)
    line = refusal(["--runner=spark", "--spark_submit_uber_jar"])
    assert line == "--spark_submit_uber_jar: give --spark_rest_url http://MASTER:6066"


def test_the_python_api_refuses_a_set_up_when_the_options_are_built(spark_home, tmp_path):
    given = {"input": str(tmp_path / "*.txt"), "output": str(tmp_path / "out")}
    with pytest.raises(PortableSettingsError, match=re.escape("no SDK worker pool")):
        embed.Options(**given, beam_options=["--runner=spark"])
    assert not (tmp_path / "out").exists()


def cluster_none(home, listening, jar, closed) -> list[str]:
    return ["--spark_master_url", f"spark://{listening}"]


def cluster_jar_gone(home, listening, jar, closed) -> list[str]:
    record_cluster(home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar) + ".gone")
    return ["--spark_master_url", f"spark://{listening}"]


def cluster_master_down(home, listening, jar, closed) -> list[str]:
    record_cluster(home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar))
    return ["--spark_master_url", f"spark://{closed}"]


def cluster_pool_down(home, listening, jar, closed) -> list[str]:
    record_cluster(home, BEAM_WORKER_POOL=closed, SPARK_JOB_SERVER_JAR=str(jar))
    return ["--spark_master_url", f"spark://{listening}"]


@pytest.mark.parametrize(
    ("set_up", "named"),
    [
        (cluster_none, "no SDK worker pool; start one with `deploy/spark/local-cluster.sh up`"),
        (cluster_jar_gone, ".gone: no such file"),
        (cluster_master_down, "nothing answers at"),
        (cluster_pool_down, "the SDK worker pool of the local Spark cluster: nothing answers"),
    ],
)
def test_sbert_embed_on_spark_refuses_with_exit_2_and_no_output(
    spark_home, fake_java, listening, jar, closed, tmp_path, capsys, set_up, named
):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n")
    out = tmp_path / "out"
    flags = set_up(spark_home, listening, jar, closed)
    argv = ["embed", "--input", str(corpus), "--output", str(out), "--runner", "spark", *flags]
    assert main(argv) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert err.startswith("sbert: error: ") and named in err and err.count("\n") == 1


def test_sbert_embed_without_java_exits_2_and_writes_nothing(
    spark_home, no_java, listening, jar, tmp_path, capsys
):
    record_cluster(spark_home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n")
    out = tmp_path / "out"
    argv = ["embed", "--input", str(corpus), "--output", str(out), "--runner", "spark"]
    assert main(argv) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert "no `java` on PATH" in err and err.count("\n") == 1


def test_sbert_run_on_spark_with_its_master_down_exits_2_before_the_job_folder_exists(
    spark_home, fake_java, listening, jar, closed, tmp_path, capsys
):
    """`sbert run` asks the master (and the recorded pool) before it makes the job folder."""
    record_cluster(spark_home, BEAM_WORKER_POOL=listening, SPARK_JOB_SERVER_JAR=str(jar))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n")
    job_dir = tmp_path / "job"
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {job_dir}\ninput: {{path: {corpus}}}\nstages: [embed]\nrunner: spark\n"
        f"beam: {{spark_master_url: 'spark://{closed}'}}\n"
    )
    assert main(["run", str(config)]) == 2
    assert not job_dir.exists()
    err = capsys.readouterr().err
    assert "nothing answers at" in err and err.count("\n") == 1
