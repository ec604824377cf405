"""What ends a pipeline on a portable runner is said in one line: its job server gone (a broken
gRPC stream, whose reader thread prints nothing) or its cluster giving the job up; a step's own
Python error is left for the stage to report. Nothing here starts Spark or Java."""

from __future__ import annotations

import threading

import grpc
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from sbert_pipeline.stage_api.beam_run import run_pipeline
from sbert_pipeline.stage_api.portable_failures import portable_failure, quiet_message_stream
from sbert_pipeline.stage_api.stops import JobFailedError

SPARK = ["--runner=spark", "--spark_master_url=spark://127.0.0.1:7077"]
JAVA_FAILURE = (
    "Pipeline BeamApp-x failed in state FAILED: org.apache.spark.SparkException: Job aborted due "
    "to stage failure: Task 0 in stage 1.0 failed 4 times, most recent failure: Lost task 0.3\n"
    "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala)"
)


class BrokenStream(grpc.RpcError):
    """What Beam raises when the job server's stream breaks (gRPC's own error)."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "Stream removed (Socket closed)"

    def __str__(self) -> str:
        return "<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = UNAVAILABLE\n>"


class FailingPipeline:
    """A pipeline whose run raises ``error``."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def run(self):
        raise self.error


def test_the_job_server_gone_is_one_line():
    failure = portable_failure(BrokenStream(), PipelineOptions(SPARK))
    assert str(failure) == (
        "the Spark job server stopped answering while the pipeline ran "
        "(UNAVAILABLE: Stream removed (Socket closed)); nothing was published"
    )
    given = PipelineOptions(["--runner=PortableRunner", "--job_endpoint=host:8099"])
    line = str(portable_failure(BrokenStream(), given))
    assert line.startswith("the job server (host:8099) stopped answering")
    flink = str(portable_failure(BrokenStream(), PipelineOptions(["--runner=flink"])))
    assert flink.startswith("the Flink job server stopped answering")


def test_the_cluster_giving_the_job_up_is_one_line_naming_its_first_line():
    line = str(portable_failure(RuntimeError(JAVA_FAILURE), PipelineOptions(SPARK)))
    assert "\n" not in line
    assert line.startswith("the Spark job failed on the cluster (org.apache.spark.SparkException")
    assert line.endswith("most recent failure: Lost task 0.3); nothing was published")


def test_a_step_s_python_error_and_other_runners_are_left_as_they_are():
    step = RuntimeError(
        "Pipeline BeamApp-x failed in state FAILED: java.lang.RuntimeException: Error received "
        "from SDK harness\nTraceback (most recent call last):\nValueError: bad row"
    )
    assert portable_failure(step, PipelineOptions(SPARK)) is None
    assert portable_failure(ValueError("a bug"), PipelineOptions(SPARK)) is None
    assert portable_failure(BrokenStream(), PipelineOptions([])) is None
    assert portable_failure(BrokenStream(), PipelineOptions(["--runner=dask"])) is None


def test_a_run_on_spark_raises_the_one_line_from_the_broken_stream():
    broken = BrokenStream()
    with pytest.raises(JobFailedError, match="job server stopped answering") as raised:
        run_pipeline(FailingPipeline(broken), PipelineOptions(SPARK))
    assert raised.value.__cause__ is broken
    # On the local runner the same error is not taken for a job server's.
    with pytest.raises(BrokenStream):
        run_pipeline(FailingPipeline(broken), PipelineOptions([]))


def raise_in_thread(name: str, error: BaseException) -> None:
    def fail() -> None:
        raise error

    thread = threading.Thread(target=fail, name=name)
    thread.start()
    thread.join()


def test_the_message_reader_s_broken_stream_prints_no_traceback(monkeypatch):
    seen: list[BaseException] = []

    def printing_hook(args: threading.ExceptHookArgs) -> None:  # Python's prints a traceback
        seen.append(args.exc_value)

    monkeypatch.setattr(threading, "excepthook", printing_hook)
    with quiet_message_stream():
        raise_in_thread("wait_until_finish_read", BrokenStream())
        raise_in_thread("wait_until_finish_read", ValueError("not a stream"))
        raise_in_thread("another", BrokenStream())
    assert [type(error) for error in seen] == [ValueError, BrokenStream]
    assert threading.excepthook is printing_hook


class CachedJobServer:
    """A job server in Beam's cache whose process went away."""

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
        raise OSError("no such process")


def test_a_spark_job_server_gone_is_dropped_so_the_next_run_starts_another(monkeypatch):
    from apache_beam.runners.portability import spark_runner

    gone = CachedJobServer()
    cache = {"options": gone}
    monkeypatch.setattr(spark_runner, "JOB_SERVER_CACHE", cache)
    given = PipelineOptions(["--runner=spark", "--job_endpoint=host:8099"])
    portable_failure(BrokenStream(), given)  # a job server of the user's: not Beam's to forget
    assert cache == {"options": gone} and not gone.stopped
    portable_failure(BrokenStream(), PipelineOptions(SPARK))
    assert cache == {} and gone.stopped
