"""Beam ``PipelineOptions`` for our jobs, with the local runner pinned to the FnApiRunner."""

from __future__ import annotations

import logging

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

logger = logging.getLogger(__name__)

LOCAL_RUNNER = "FnApiRunner"
# Beam's DirectRunner tries the Prism runner first, which downloads a binary at run time and
# fails offline; the FnApiRunner is the same in-process engine without that step.
_REPLACED_RUNNERS = {None, "DirectRunner", "SwitchingDirectRunner"}


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Parse Beam arguments; no runner (or the DirectRunner) means the local FnApiRunner.

    ``--direct_num_workers N --direct_running_mode multi_processing`` are honoured by it.
    """
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if standard.runner in _REPLACED_RUNNERS:
        if standard.runner is not None:
            logger.info("running %s as %s (no Prism download)", standard.runner, LOCAL_RUNNER)
        standard.runner = LOCAL_RUNNER
    return options


def runner_name(options: PipelineOptions) -> str:
    """The runner the options select, as a plain name."""
    runner = options.view_as(StandardOptions).runner
    return runner if isinstance(runner, str) else type(runner).__name__


def is_local(options: PipelineOptions) -> bool:
    """True for the in-process runner."""
    return runner_name(options) in {LOCAL_RUNNER, "BundleBasedDirectRunner", "TestDirectRunner"}
