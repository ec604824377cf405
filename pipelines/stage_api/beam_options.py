"""Beam ``PipelineOptions`` for our jobs, with the local runner pinned to the FnApiRunner.

Options a job does not know are handed to Beam, and Beam drops the ones it does not know either
with a warning, so a typo (``--keep-txt``) would run the job without the option. Here every
such option is an error that names the closest known spellings. The runner is looked up as Beam
looks it up, but when the options are checked: Beam would only find an unknown one when the
pipeline is built, after the stage has started its output.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner
from sbert_pipeline.stage_api.dask_cluster import (
    check_dask_options,
    is_dask,
    runner_path,
)
from sbert_pipeline.stage_api.flag_recording import FlagRecording
from sbert_pipeline.stage_api.portable_settings import (
    check_portable_options,
    with_portable_defaults,
)

logger = logging.getLogger(__name__)

LOCAL_RUNNER = "FnApiRunner"
# The runners whose workers are this process (or its children on this machine).
LOCAL_RUNNERS = frozenset({LOCAL_RUNNER, "BundleBasedDirectRunner", "TestDirectRunner"})
# Beam's DirectRunner tries the Prism runner first, which downloads a binary at run time and
# fails offline; the FnApiRunner is the same in-process engine without that step.
_REPLACED_RUNNERS = {None, "DirectRunner", "SwitchingDirectRunner"}
# Beam's short runner names (lower case, as Beam compares them) -> the runner's class path.
_KNOWN_RUNNERS = {
    path.rpartition(".")[2].lower(): path for path in StandardOptions.ALL_KNOWN_RUNNERS
}


class UnknownOptionError(ValueError):
    """An option neither the job nor Beam knows; the message names close matches."""


def beam_parser(beam_args: Sequence[str] = ()) -> argparse.ArgumentParser:
    """Beam's own argument parser with every registered options class, as Beam builds it (for
    the runner ``beam_args`` select), recording its flags (``.flags``, ``.actions``)."""
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    class RecordingBeamParser(FlagRecording, _BeamArgumentParser):
        """Beam's parser, listing what its option classes add."""

    runner = PipelineOptions(list(beam_args)).view_as(StandardOptions).runner
    runner = runner_path(runner) if isinstance(runner, str) else ""
    # A runner named by its full path (package.module.Class) registers its options on import,
    # as Beam imports it to create the runner.
    module = runner.rpartition(".")[0] or None
    if module is not None:
        # Without the runner's extra installed, Beam says so when the runner is created.
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    parser = RecordingBeamParser(allow_abbrev=False)
    classes: dict[str, type] = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)  # Beam's own registration hook
    return parser


def beam_option_names(beam_args: Sequence[str] = ()) -> list[str]:
    """Every ``--option`` Beam accepts (for the runner ``beam_args`` select)."""
    return sorted(beam_parser(beam_args).actions)


def check_beam_args(beam_args: Sequence[str], job_options: Iterable[str] = ()) -> None:
    """Refuse arguments that neither the job (``job_options``) nor Beam knows.

    Args:
        beam_args: what the job's parser left over, handed to Beam.
        job_options: the job's own option strings, offered as corrections too.

    Raises:
        UnknownOptionError: naming each unknown option and its close matches, or a runner
            Beam cannot create.
    """
    options = PipelineOptions(list(beam_args))
    check_runner(options.view_as(StandardOptions).runner)
    parser = beam_parser(beam_args)
    _, unknown = parser.parse_known_args(list(beam_args))
    if not unknown:
        _check_cluster(options)
        return
    known = [*job_options, *parser.actions]
    problems = []
    after_option = False
    for arg in unknown:
        if arg == "--":
            break
        if arg.startswith("-"):
            name = arg.split("=", 1)[0]
            matches = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
            hint = f" (did you mean {' or '.join(matches)}?)" if matches else ""
            problems.append(f"unknown option {name}{hint}")
            after_option = "=" not in arg
        elif after_option:  # the value of the unknown option just named
            after_option = False
        else:
            problems.append(f"unexpected argument {arg!r}")
    raise UnknownOptionError("; ".join(problems))


def _check_cluster(options: PipelineOptions) -> None:
    """The cluster settings of a runner that has them (Dask's scheduler; a portable runner's
    job server, master and SDK workers), checked now."""
    runner = options.view_as(StandardOptions).runner
    if isinstance(runner, str) and is_dask(runner_path(runner)):
        check_dask_options(options)
    check_portable_options(options)


def check_runner(runner: Any) -> None:
    """Refuse a ``--runner`` Beam could not create, found as Beam finds it: a known short name
    (any case, ``Runner`` suffix optional) or a ``package.module.Class`` path, imported here.
    A runner object (set in Python) is taken as it is.

    Raises:
        UnknownOptionError: one line naming the runner and what to give instead.
    """
    if not isinstance(runner, str) or runner in _REPLACED_RUNNERS:
        return
    key = runner_path(runner).lower()
    path = _KNOWN_RUNNERS.get(key, _KNOWN_RUNNERS.get(key + "runner", runner_path(runner)))
    module, _, name = path.rpartition(".")
    if not module:
        known = sorted({*StandardOptions.KNOWN_RUNNER_NAMES, "dask"})
        close = difflib.get_close_matches(runner, known, n=2, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise UnknownOptionError(
            f"--runner {runner}: not a Beam runner; {hint}give one of {', '.join(known)}, or a "
            "runner class as package.module.Class"
        )
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as err:
        raise UnknownOptionError(
            f"--runner {runner}: cannot be imported ({err}); check the name, or install what "
            "the runner needs (e.g. apache-beam[gcp] for Dataflow)"
        ) from None
    if not (isinstance(found, type) and issubclass(found, PipelineRunner)):
        raise UnknownOptionError(f"--runner {runner}: {module} has no runner class {name}")


def check_beam_options(value: Any) -> tuple[str, ...] | PipelineOptions:
    """A stage's ``beam_options`` as its run reads them, checked before anything is touched: a
    list of flags (as a tuple) whose flags and runner Beam knows, or a ``PipelineOptions``
    whose runner it knows.

    Raises:
        TypeError: neither (a single string of flags: a list is asked for).
        UnknownOptionError: an unknown flag or runner.
    """
    if isinstance(value, PipelineOptions):
        check_runner(value.view_as(StandardOptions).runner)
        _check_cluster(value)
        return value
    if isinstance(value, str) or not isinstance(value, list | tuple):
        example = value.split() if isinstance(value, str) else ["--runner=DataflowRunner"]
        raise TypeError(
            f"expected a list of flags or a PipelineOptions, got {value!r}; pass a list such as "
            f"{example!r}"
        )
    flags = tuple(value)
    if not all(isinstance(flag, str) for flag in flags):
        raise TypeError(f"expected a list of flags (strings), got {list(flags)!r}")
    check_beam_args(flags)
    return flags


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Parse Beam arguments; no runner (or the DirectRunner) means the local FnApiRunner.

    ``--direct_num_workers N --direct_running_mode multi_processing`` are honoured by it.
    A portable runner (Spark, Flink) gets its defaults: the local cluster's SDK worker pool
    and job server jar, its SDK workers kept for the job.

    Raises:
        UnknownOptionError: an argument Beam does not know (Beam itself would drop it).
        PortableSettingsError: a portable runner's set-up that cannot work.
    """
    check_beam_args(beam_args)
    options = PipelineOptions(beam_args)
    standard = options.view_as(StandardOptions)
    if standard.runner in _REPLACED_RUNNERS:
        if standard.runner is not None:
            logger.warning(
                "running --runner %s as Beam's %s (the DirectRunner would first try Prism, "
                "which downloads a binary)",
                standard.runner,
                LOCAL_RUNNER,
            )
        standard.runner = LOCAL_RUNNER
    elif isinstance(standard.runner, str):
        standard.runner = runner_path(standard.runner)
    return with_portable_defaults(options)


def runner_name(options: PipelineOptions) -> str:
    """The runner the options select, as a plain name."""
    runner = options.view_as(StandardOptions).runner
    return runner if isinstance(runner, str) else type(runner).__name__


def is_local(options: PipelineOptions) -> bool:
    """True for the in-process runner."""
    return runner_name(options) in LOCAL_RUNNERS
