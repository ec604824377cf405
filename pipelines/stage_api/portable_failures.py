"""What ended a pipeline on Beam's portable runners (Spark, Flink, a job endpoint), in one line.

On these runners the launcher only follows the job through the job server's gRPC streams. When
the job server goes away (killed, its machine gone) the stream breaks and Beam raises gRPC's own
error, whose text is several lines of gRPC internals; when the cluster gives the job up (an
executor lost too often) Beam raises ``Pipeline ... failed in state FAILED:`` with the Java
stack trace. Either way nothing was published by the launcher, and the user needs one line
saying what stopped. A failure that carries a Python traceback is the pipeline's own step
failing: the stage reads it (:func:`sbert_pipeline.stage_api.beam_run.step_error`), so it is
left as Beam raised it.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions
from sbert_pipeline.stage_api.portable_settings import portable_kind
from sbert_pipeline.stage_api.stops import JobFailedError

logger = logging.getLogger(__name__)

# Beam's wording when the job ended in a state other than DONE (portable_runner.py).
_FAILED_STATE = re.compile(r"^Pipeline (\S+) failed in state (\w+): ?")
# A Python traceback in the job's error: the SDK worker's own, for a step that raised.
_PYTHON_TRACEBACK = "Traceback (most recent call last)"
# Longest reason quoted from the cluster's error (its first line).
_REASON_CHARS = 300
# The thread in which Beam reads the job's messages (portable_runner.py): the broken stream ends it
# with gRPC's error, which Python prints as a traceback.
_MESSAGE_THREAD = "wait_until_finish_read"
_ENGINES = {"spark": "Spark", "flink": "Flink", "portable": "portable"}


@contextmanager
def quiet_message_stream() -> Iterator[None]:
    """While a portable pipeline runs, the job messages' reader thread ending on a broken stream
    is logged at DEBUG instead of printed as a traceback (the run's error holds the same):
    :func:`portable_failure` says what happened in one line. The reader is waited for (briefly)
    before Python's own hook is back."""
    import grpc

    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        thread = args.thread
        if (
            thread is not None
            and thread.name == _MESSAGE_THREAD
            and isinstance(args.exc_value, grpc.RpcError)
        ):
            logger.debug("the job messages' stream ended: %s", args.exc_value)
            return
        previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        for thread in threading.enumerate():
            if thread.name == _MESSAGE_THREAD and thread is not threading.current_thread():
                thread.join(2)
        threading.excepthook = previous


def portable_failure(err: BaseException, options: PipelineOptions) -> JobFailedError | None:
    """One line for what ended a portable runner's pipeline: its job server gone (a broken gRPC
    stream; a Spark job server Beam started is then forgotten, so that the next run starts
    another) or the cluster giving the job up. None when the runner is not a portable one, or
    ``err`` is a step's own Python error (the stage reports it) or anything else."""
    kind = portable_kind(options.view_as(StandardOptions).runner)
    if kind is None:
        return None
    endpoint = options.view_as(PortableOptions).job_endpoint
    server = "the job server" if kind == "portable" else f"the {_ENGINES[kind]} job server"
    if endpoint and endpoint != "embed":
        server = f"{server} ({endpoint})"
    import grpc

    if isinstance(err, grpc.RpcError):
        logger.debug("the job server's stream broke: %s", err)
        if kind == "spark" and not endpoint:
            forget_spark_job_servers()
        return JobFailedError(
            f"{server} stopped answering while the pipeline ran ({_rpc_reason(err)}); "
            "nothing was published"
        )
    text = str(err)
    failed = _FAILED_STATE.match(text)
    if not isinstance(err, RuntimeError) or failed is None or _PYTHON_TRACEBACK in text:
        return None
    # The whole error (a Java stack trace) stays the cause of the line, which names its first line.
    logger.debug("the job's error: %s", text)
    reason = _first_line(text[failed.end() :]) or f"state {failed.group(2)}"
    return JobFailedError(
        f"the {_ENGINES[kind]} job failed on the cluster ({reason}); nothing was published"
    )


def forget_spark_job_servers() -> None:
    """Stop the Spark job servers Beam started in this process and drop them from its cache.

    Beam keeps the job server it started for the process's later runs and hands out the same
    one as long as it is cached, dead or not: after the job server went away, every later run
    in this process (the Python API in a notebook) would fail at once. Dropped, the next run
    starts a new one.
    """
    from apache_beam.runners.portability import spark_runner

    for key, server in list(spark_runner.JOB_SERVER_CACHE.items()):
        try:
            server.stop()
        except Exception as err:  # its process is gone already: nothing left to stop
            logger.debug("stopping a Spark job server that went away: %s", err)
        spark_runner.JOB_SERVER_CACHE.pop(key, None)


def _rpc_reason(err: BaseException) -> str:
    """``CODE: details`` of a gRPC error (its code and details, without gRPC's debug text)."""
    code = getattr(err, "code", None)
    details = getattr(err, "details", None)
    try:
        name = code().name if callable(code) else ""
        said = details() if callable(details) else ""
    except Exception:  # a stream that broke before it had a status
        name, said = "", ""
    return ": ".join(part for part in (name, _first_line(said or "")) if part) or type(err).__name__


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 3] + "..."
