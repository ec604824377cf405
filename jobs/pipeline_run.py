"""Run a Beam pipeline to the end and say how long it took on which runner.

Every Beam job runs its pipeline the same way: run, wait until it finishes, close the client the
Dask runner leaves open, and name the runner for the manifest. Stage orchestration in
``pipelines/`` receives :func:`transform_runner`'s callable, so pipelines never import jobs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineResult

from jobs.beam_options import is_local, pipeline_options, runner_name


@dataclass(frozen=True)
class PipelineRun:
    """A finished pipeline: its result (for metrics), the seconds it ran and the runner's name."""

    result: PipelineResult
    seconds: float
    runner: str


def options_for(beam_args: list[str], test_pipeline: beam.Pipeline | None) -> PipelineOptions:
    """The options a run uses: the test pipeline's when given, else parsed from ``beam_args``."""
    return test_pipeline.options if test_pipeline is not None else pipeline_options(beam_args)


def show_progress(options: PipelineOptions | None = None) -> None:
    """Show the stages' progress where the user watches the terminal: on a local runner (or,
    for ``options=None``, a job that runs in this process), unless ``--quiet`` raised the log
    level above WARNING. Then the long loops draw bars (:mod:`pipelines.vectors.progress`) and
    the stages' INFO lines are logged; otherwise progress is off. Bars left by an earlier job in
    this process are closed first."""
    from pipelines.vectors.progress import enable_progress

    quiet = logging.getLogger().getEffectiveLevel() > logging.WARNING
    on = not quiet and (options is None or is_local(options))
    enable_progress(on)
    if on:
        logging.getLogger("pipelines").setLevel(logging.INFO)


def new_pipeline(options: PipelineOptions, test_pipeline: beam.Pipeline | None) -> beam.Pipeline:
    """The pipeline to build into: the test's one when given, else a new one on ``options``."""
    return test_pipeline if test_pipeline is not None else beam.Pipeline(options=options)


def run_pipeline(
    pipeline: beam.Pipeline,
    options: PipelineOptions,
    *,
    test_pipeline: beam.Pipeline | None = None,
) -> PipelineRun:
    """Run ``pipeline`` and wait for it; the seconds count from the start of the run."""
    start = time.perf_counter()
    result = pipeline.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - start
    client = getattr(result, "client", None)  # the Dask runner leaves its client open
    if client is not None:
        client.close()
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
