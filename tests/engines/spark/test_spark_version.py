"""A job server jar whose Spark is of another line than the master's is refused in one line
naming both; the versions come from the jar (self-contained, or the local cluster's class-path
jar) and from the master's REST server or web UI (fake servers here; nothing runs Java), and
what cannot be told refuses nothing."""

from __future__ import annotations

import json
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sbert_pipeline.stage_api import spark_version
from sbert_pipeline.stage_api.spark_version import (
    SparkVersionError,
    check_spark_version,
    jar_spark_version,
    master_spark_version,
)


def self_contained_jar(path: Path, spark: str, scala: str = "2.12") -> Path:
    """A job server jar with Spark inside, and Spark's Maven record."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
        archive.writestr(
            f"META-INF/maven/org.apache.spark/spark-core_{scala}/pom.properties",
            f"artifactId=spark-core_{scala}\ngroupId=org.apache.spark\nversion={spark}\n",
        )
        archive.writestr("org/apache/spark/SparkContext.class", b"")
    return path


def class_path_jar(home: Path, spark: str, *, in_manifest: bool = True) -> Path:
    """The local cluster's jar: a manifest whose Class-Path names jars/* (wrapped at 72 bytes
    as the script writes it), beside the jars/ folder."""
    (home / "jars").mkdir(parents=True)
    names = ["beam-runners-spark-3-2.62.0.jar", f"spark-core_2.12-{spark}.jar", "zstd-jni.jar"]
    for name in names:
        (home / "jars" / name).write_bytes(b"")
    line = "Class-Path: " + " ".join(f"jars/{name}" for name in names if in_manifest)
    wrapped = "\r\n ".join([line[:72]] + [line[i : i + 71] for i in range(72, len(line), 71)])
    jar = home / "beam-runners-spark-3-job-server-2.62.0.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", f"Manifest-Version: 1.0\r\n{wrapped}\r\n\r\n")
    return jar


def master_page(master: str, version: str) -> str:
    """What a standalone master's web UI shows (trimmed)."""
    return (
        f'<html><head><title>Spark Master at {master}</title></head><body><div class="brand">'
        f'<span class="version" style="margin-right: 15px;">{version}</span></div>'
        f"<h3>Spark Master at {master}</h3><ul><li><strong>URL:</strong> {master}</li></ul>"
        "</body></html>"
    )


class FakeServer:
    """An HTTP server answering each path with a status and a body set by the test."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, str]] = {}
        answers = self.answers

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = answers.get(self.path, (404, "not found"))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[FakeServer]:
    fake = FakeServer()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture(autouse=True)
def no_default_ui(closed, monkeypatch) -> None:
    """Port 8080 of this machine is never asked (a real master's UI may be there)."""
    monkeypatch.setattr(spark_version, "DEFAULT_UI_PORT", int(closed.rpartition(":")[2]))


@pytest.fixture
def master(closed) -> str:
    """A master URL (its port is not asked: only its web UI or REST server is)."""
    return f"spark://{closed}"


def test_a_self_contained_jar_tells_its_spark_from_spark_s_maven_record(tmp_path):
    assert jar_spark_version(self_contained_jar(tmp_path / "js.jar", "3.5.1")) == "3.5.1"
    scala_13 = self_contained_jar(tmp_path / "js13.jar", "3.4.0", scala="2.13")
    assert jar_spark_version(scala_13) == "3.4.0"


def test_the_local_cluster_s_jar_tells_its_spark_from_its_class_path(tmp_path):
    assert jar_spark_version(class_path_jar(tmp_path / "a", "3.2.2")) == "3.2.2"
    # A manifest that names no jars: the jars/ folder beside it.
    assert jar_spark_version(class_path_jar(tmp_path / "b", "3.3.4", in_manifest=False)) == "3.3.4"


def test_a_jar_that_does_not_tell_gives_none(tmp_path):
    plain = tmp_path / "plain.jar"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
    assert jar_spark_version(plain) is None
    (tmp_path / "broken.jar").write_bytes(b"not a zip")
    assert jar_spark_version(tmp_path / "broken.jar") is None
    assert jar_spark_version(tmp_path / "missing.jar") is None


def test_the_master_s_web_ui_tells_its_version_when_the_page_is_that_master_s(server, master):
    server.answers["/"] = (200, master_page(master, "3.5.1"))
    assert master_spark_version(master, ui_urls=[server.url]) == "3.5.1"
    # The same master named by another host name of the same address.
    by_name = master.replace("127.0.0.1", "localhost")
    assert master_spark_version(by_name, ui_urls=[server.url]) == "3.5.1"


def test_the_ui_of_another_master_is_not_taken_for_it(server, master, listening):
    server.answers["/"] = (200, master_page(f"spark://{listening}", "3.5.1"))
    assert master_spark_version(master, ui_urls=[server.url]) is None


def test_the_ui_is_looked_for_at_port_8080_of_the_master_host(server, master, monkeypatch):
    server.answers["/"] = (200, master_page(master, "3.3.0"))
    monkeypatch.setattr(spark_version, "DEFAULT_UI_PORT", server.port)
    assert master_spark_version(master) == "3.3.0"


def test_the_rest_server_tells_the_version_even_in_an_error_answer(server, master):
    answer = {"action": "ErrorResponse", "message": "Unknown", "serverSparkVersion": "3.4.1"}
    server.answers["/v1/submissions/status/sbert-version-check"] = (400, json.dumps(answer))
    assert master_spark_version(master, rest_url=server.url + "/") == "3.4.1"


def test_a_master_that_does_not_tell_gives_none(server, master, closed):
    assert master_spark_version(master, ui_urls=[server.url]) is None  # 404
    server.answers["/"] = (200, "<html>not Spark</html>")
    assert master_spark_version(master, ui_urls=[server.url], rest_url=server.url) is None
    assert master_spark_version(master, ui_urls=[f"http://{closed}"]) is None


def test_another_spark_line_is_refused_in_one_line_naming_both(tmp_path, server, master):
    server.answers["/"] = (200, master_page(master, "3.5.1"))
    jar = class_path_jar(tmp_path / "home", "3.2.2")
    with pytest.raises(SparkVersionError) as raised:
        check_spark_version(str(jar), master, ui_urls=[server.url])
    line = str(raised.value)
    assert "\n" not in line
    assert line.startswith(f"the Spark job server runs Spark 3.2.2 and the master {master} is")
    assert "Spark 3.5.1" in line and "local-cluster.sh up" in line
    assert "--spark_job_server_jar of a job server built for Spark 3.5" in line
    assert isinstance(raised.value, ValueError)  # a set-up error: exit status 2


def test_an_uber_jar_s_spark_is_compared_with_the_rest_server_s(tmp_path, server):
    answer = {"action": "SubmissionStatusResponse", "serverSparkVersion": "3.5.1"}
    server.answers["/v1/submissions/status/sbert-version-check"] = (200, json.dumps(answer))
    jar = self_contained_jar(tmp_path / "js.jar", "3.2.2")
    with pytest.raises(SparkVersionError, match=r"master http://127\.0\.0\.1:\d+ is Spark 3\.5\.1"):
        check_spark_version(str(jar), None, rest_url=server.url)


def test_the_same_spark_line_runs_whatever_its_patch_release(tmp_path, server, master):
    server.answers["/"] = (200, master_page(master, "3.2.4"))
    jar = self_contained_jar(tmp_path / "js.jar", "3.2.2")
    check_spark_version(str(jar), master, ui_urls=[server.url])


def test_what_cannot_be_told_refuses_nothing(tmp_path, server, master, closed):
    jar = class_path_jar(tmp_path / "home", "3.2.2")
    check_spark_version(str(jar), master, ui_urls=[f"http://{closed}"])  # no UI answers
    server.answers["/"] = (200, master_page(master, "3.5.1"))
    plain = tmp_path / "plain.jar"
    with zipfile.ZipFile(plain, "w") as archive:
        archive.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
    check_spark_version(str(plain), master, ui_urls=[server.url])  # the jar does not tell
    check_spark_version(None, master, ui_urls=[server.url])
    check_spark_version("https://example.invalid/js.jar", master, ui_urls=[server.url])
    check_spark_version(str(jar), "local[2]", ui_urls=[server.url])


def test_sbert_embed_on_a_master_of_another_spark_line_exits_2_and_writes_nothing(
    tmp_path, spark_home, server, fake_java, listening, capsys
):
    """The check is wired in: the local cluster's record names the master's web UI, which
    shows Spark 3.5.1, and the recorded jar is built for 3.2.2."""
    from engine_jobs import record_cluster
    from sbert_pipeline.jobs.cli import main

    master = f"spark://127.0.0.1:{server.port}"  # it answers: the fake server listens there
    server.answers["/"] = (200, master_page(master, "3.5.1"))
    jar = class_path_jar(tmp_path / "runtime", "3.2.2")
    record_cluster(
        spark_home,
        BEAM_WORKER_POOL=listening,
        SPARK_JOB_SERVER_JAR=str(jar),
        SPARK_MASTER_WEBUI_URL=server.url,
    )
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one\ntwo\n")
    out = tmp_path / "out"
    argv = ["embed", "--input", str(corpus), "--output", str(out)]
    assert main([*argv, "--runner", "spark", "--spark_master_url", master]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Spark 3.2.2" in err and "Spark 3.5.1" in err
