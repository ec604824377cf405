"""Beam ``PipelineOptions`` for our jobs, with the local runner pinned to the FnApiRunner.

Options a job does not know are handed to Beam, and Beam drops the ones it does not know either
with a warning, so a typo (``--keep-txt``) would run the job without the option. Here every
such option is an error that names the closest known spellings.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import logging
from collections.abc import Iterable, Sequence

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.stage_api.flag_recording import FlagRecording

logger = logging.getLogger(__name__)

LOCAL_RUNNER = "FnApiRunner"
# The runners whose workers are this process (or its children on this machine).
LOCAL_RUNNERS = frozenset({LOCAL_RUNNER, "BundleBasedDirectRunner", "TestDirectRunner"})
# Beam's DirectRunner tries the Prism runner first, which downloads a binary at run time and
# fails offline; the FnApiRunner is the same in-process engine without that step.
_REPLACED_RUNNERS = {None, "DirectRunner", "SwitchingDirectRunner"}
# Runners whose options are registered only when their module is imported.
_RUNNER_OPTION_MODULES = {"DaskRunner": "apache_beam.runners.dask.dask_runner"}


class UnknownOptionError(ValueError):
    """An option neither the job nor Beam knows; the message names close matches."""


def beam_parser(beam_args: Sequence[str] = ()) -> argparse.ArgumentParser:
    """Beam's own argument parser with every registered options class, as Beam builds it (for
    the runner ``beam_args`` select), recording its flags (``.flags``, ``.actions``)."""
    from apache_beam.options.pipeline_options import _BeamArgumentParser

    class RecordingBeamParser(FlagRecording, _BeamArgumentParser):
        """Beam's parser, listing what its option classes add."""

    runner = PipelineOptions(list(beam_args)).view_as(StandardOptions).runner
    runner = runner if isinstance(runner, str) else ""
    # A runner named by its full path (package.module.Class) registers its options on import,
    # as Beam imports it to create the runner.
    module = _RUNNER_OPTION_MODULES.get(runner) or (runner.rpartition(".")[0] or None)
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
        UnknownOptionError: naming each unknown option and its close matches.
    """
    parser = beam_parser(beam_args)
    _, unknown = parser.parse_known_args(list(beam_args))
    if not unknown:
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


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Parse Beam arguments; no runner (or the DirectRunner) means the local FnApiRunner.

    ``--direct_num_workers N --direct_running_mode multi_processing`` are honoured by it.

    Raises:
        UnknownOptionError: an argument Beam does not know (Beam itself would drop it).
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
    return options


def runner_name(options: PipelineOptions) -> str:
    """The runner the options select, as a plain name."""
    runner = options.view_as(StandardOptions).runner
    return runner if isinstance(runner, str) else type(runner).__name__


def is_local(options: PipelineOptions) -> bool:
    """True for the in-process runner."""
    return runner_name(options) in LOCAL_RUNNERS
