"""Run a Beam pipeline (to the end, or only to its submission) and say how long it took where.

Every Beam job runs its pipeline the same way: run, wait until it finishes, close the client the
Dask runner leaves open, and name the runner for the manifest. ``sbert embed``, whose last step
publishes, may also only submit (Beam's ``--no_wait_until_finish``); :func:`step_error` gives back
what a step raised through Beam's wrapping. Stage orchestration in
``pipelines/`` receives :func:`transform_runner`'s callable.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineResult
from sbert_pipeline.stage_api.beam_options import (
    LOCAL_RUNNERS,
    is_local,
    pipeline_options,
    runner_name,
)
from sbert_pipeline.stage_api.dask_cluster import is_dask, quiet_client, resolved, run_failure
from sbert_pipeline.stage_api.portable_failures import portable_failure, quiet_message_stream
from sbert_pipeline.stage_api.portable_settings import portable_kind, ready_to_run
from sbert_pipeline.stage_api.stops import raise_pending_stop, stop_signal

logger = logging.getLogger(__name__)
# What Beam appends to an exception raised in a step, once per enclosing step.
_STEP_SUFFIX = re.compile(r"(?: \[while running '[^\]]*'\])+$")


@dataclass(frozen=True)
class PipelineRun:
    """A finished pipeline: its result (for metrics), the seconds it ran and the runner's name."""

    result: PipelineResult
    seconds: float
    runner: str


def options_for(
    beam_args: Sequence[str] | PipelineOptions, test_pipeline: beam.Pipeline | None
) -> PipelineOptions:
    """The options a run uses: the test pipeline's when given, else ``beam_args`` (a
    ``PipelineOptions`` as it is, a list of flags parsed, the local runner pinned), with a
    portable runner's defaults filled (the local cluster's SDK worker pool) and its cluster
    asked to answer (:func:`~sbert_pipeline.stage_api.portable_settings.ready_to_run`). On the Dask
    runner, its cluster made ready: ``local[N]`` started, the partitions sized by its workers
    (:func:`~sbert_pipeline.stage_api.dask_cluster.resolved`)."""
    if test_pipeline is not None:
        return test_pipeline.options
    if isinstance(beam_args, PipelineOptions):
        return resolved(ready_to_run(beam_args))
    return resolved(ready_to_run(pipeline_options(list(beam_args))))


def workers_here(options: PipelineOptions, pipeline: beam.Pipeline | None) -> bool:
    """Whether the pipeline's workers run on this machine: a given (test) pipeline's runner,
    or the options' runner, is the in-process one."""
    if pipeline is not None:
        return type(pipeline.runner).__name__ in LOCAL_RUNNERS
    return is_local(options)


def workers_read_local_paths(options: PipelineOptions, pipeline: beam.Pipeline | None) -> bool:
    """Whether the workers read and write the launcher's local paths: the in-process runner's
    do, and so do Dask's, whose workers share the launcher's filesystem (a LocalCluster, or a
    cluster on shared storage mounted at the same paths, the only way a Dask job reads local
    paths). The launcher's temporary folders are never shared (:func:`workers_here`)."""
    return workers_here(options, pipeline) or (
        pipeline is None and is_dask(options.view_as(StandardOptions).runner)
    )


def show_progress(options: PipelineOptions | None = None) -> None:
    """Show the stages' progress where the user watches the terminal: on a local runner (or,
    for ``options=None``, a job that runs in this process), unless ``--quiet`` raised the log
    level above WARNING. Then the long loops draw bars (:mod:`sbert_pipeline.vectors.progress`) and
    the stages' INFO lines are logged; otherwise progress is off. Bars left by an earlier job in
    this process are closed first."""
    from sbert_pipeline.vectors.progress import show_progress_unless_quiet

    show_progress_unless_quiet(here=options is None or is_local(options))


def new_pipeline(options: PipelineOptions, test_pipeline: beam.Pipeline | None) -> beam.Pipeline:
    """The pipeline to build into: the test's one when given, else a new one on ``options``."""
    return test_pipeline if test_pipeline is not None else beam.Pipeline(options=options)


def waits(options: PipelineOptions) -> bool:
    """Whether the launcher waits for the job: not with Beam's ``--no_wait_until_finish``
    (a Dataflow flex template, a detached Spark or Flink submission), except on the Dask runner,
    whose job is cancelled when its launcher lets go of the client."""
    if not options.view_as(StandardOptions).no_wait_until_finish:
        return True
    if "DaskRunner" in runner_name(options):
        logger.warning(
            "--no_wait_until_finish: the Dask runner's job ends with its launcher, which waits"
        )
        return True
    return False


def run_pipeline(
    pipeline: beam.Pipeline,
    options: PipelineOptions,
    *,
    test_pipeline: beam.Pipeline | None = None,
    wait: bool = True,
) -> PipelineRun:
    """Run ``pipeline`` and (unless ``wait`` is false) wait for it to finish.

    A stage that publishes after the run waits whatever the options say; only a pipeline
    whose last step publishes (``sbert embed``) passes ``wait=waits(options)``. The seconds
    count from the start of the run (to the submission, when not waiting).
    """
    if wait and not waits(options) and "DaskRunner" not in runner_name(options):
        logger.warning(
            "--no_wait_until_finish: this stage publishes its output after the pipeline "
            "finishes, so it waits for it"
        )
    raise_pending_stop()
    start = time.perf_counter()
    on_dask = test_pipeline is None and is_dask(options.view_as(StandardOptions).runner)
    on_portable = test_pipeline is None and portable_kind(runner_name(options)) is not None
    result = None
    # On Dask, the client's own tracebacks (a scheduler gone) stay out of the log until it is
    # closed, and on a portable runner the job messages' reader's: run_failure and
    # portable_failure say what happened in one line.
    quiet = quiet_client() if on_dask else quiet_message_stream() if on_portable else None
    with quiet or contextlib.nullcontext():
        try:
            result = pipeline.run()
            if wait:
                result.wait_until_finish()
                # Checked before the client closes: a scheduler gone leaves futures unfinished.
                lost = run_failure(None, result, options) if on_dask else None
                if lost is not None:
                    raise lost
        except Exception as err:
            # Beam re-raises a Ctrl-C in a step as that step's RuntimeError; raised as the stop
            # it is, no `except Exception` above (a stage runner recording a failure) takes it
            # for one.
            stop = stop_signal(err)
            if stop is not None:
                raise type(stop)(*stop.args) from err
            lost = run_failure(err, result, options) if on_dask else None
            if on_portable:  # its job server gone, or its cluster giving the job up
                lost = portable_failure(err, options)
            if lost is not None:
                raise lost from err
            raise
        finally:
            client = getattr(result, "client", None)  # the Dask runner leaves its client open
            if client is not None and wait:
                client.close()
    seconds = time.perf_counter() - start
    # A TestPipeline is given its runner directly rather than through the options.
    runner = type(pipeline.runner).__name__ if test_pipeline is not None else runner_name(options)
    return PipelineRun(result, seconds, runner)


TransformRunner = Callable[[str, beam.PTransform], PipelineRun]


def transform_runner(
    options: PipelineOptions, test_pipeline: beam.Pipeline | None = None
) -> TransformRunner:
    """A callable that runs one transform, under a label, as the whole pipeline."""

    def run(label: str, transform: beam.PTransform) -> PipelineRun:
        pipeline = new_pipeline(options, test_pipeline)
        _ = pipeline | label >> transform
        return run_pipeline(pipeline, options, test_pipeline=test_pipeline)

    return run


def step_error(
    err: BaseException, kinds: tuple[type[Exception], ...], *, step: str | None = None
) -> Exception | None:
    """The exception of one of ``kinds`` that a pipeline step raised, as the step raised it.

    Beam re-raises a step's exception with ``[while running 'Step']`` appended when the step
    ran in this process (as a ``RuntimeError`` naming the type when it cannot rebuild it), and
    as a ``RuntimeError`` holding the worker's traceback when it ran in another
    (``--direct_running_mode multi_processing``, a portable job server). Each gives back the
    exception with the step's own message; None when ``err`` is none of ``kinds`` (or, with
    ``step``, was not raised in the step of that label or one inside it).
    """
    text = str(err)
    if step is not None and f"[while running '{step}" not in text:
        return None
    for kind in kinds:
        if isinstance(err, kind):
            return _rebuilt(err, _STEP_SUFFIX.sub("", text))
    for kind in kinds:
        found = re.findall(rf"(?m)^(?:[\w.]+\.)?{kind.__name__}: (.+)$", text)
        if found:
            return kind(_STEP_SUFFIX.sub("", found[-1].strip()))
    return None


def _rebuilt(err: BaseException, message: str) -> Exception:
    try:
        return type(err)(message)
    except Exception:  # a constructor that takes other arguments: the exception as raised
        return err
