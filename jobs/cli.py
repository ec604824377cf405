"""The ``sbert`` command line: one entry point, one sub-command per job.

A command's options are parsed and checked with its parser (generated from the stage's
``Options``, or ``jobs/parsers/`` for run and submit; no torch, no Beam), so ``sbert --help``,
``sbert CMD --help`` and a mistyped option answer at once; the stage's modules, and with them
torch and Beam, are imported only when the command runs, after logging is set up (the package
drops the import-time warning of Beam's optional BigQuery client).

Exit statuses: 0 done; 1 the job failed (rows lost, too many rejected), the disk filled up or
the output is on a read-only file system; 2 a mistake the message names (an option, a missing
file, a damaged input, a run over its memory budget); 130 Ctrl-C; 143 SIGTERM (the process
ends within ``sbert_pipeline.jobs.user_stops.STOP_DEADLINE_S`` of the signal, whatever it is
doing). Each failure is one line on stderr; a stop the user caused (Ctrl-C, SIGTERM, a full disk, a
read-only output) says that the previous output is unchanged, which the staged commit
guarantees (``pipelines/io/output_dir.py``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import difflib
import gc
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sbert_pipeline.io.resources import ResourceError, return_freed_arrow_memory_at_once
from sbert_pipeline.jobs import stage_cli
from sbert_pipeline.jobs.parsers import CommandParser, HelpFormatter
from sbert_pipeline.jobs.user_stops import StopDeadline, user_stop
from sbert_pipeline.stage_api.stops import JobFailedError, Terminated, note_stop

from sbert_core import __version__
from sbert_core.errors import DataFileError, ModelLoadError

# The commands, each summary its line in `sbert --help`: every stage package's (its command is
# generated from its Options, jobs/stage_cli.py), and run and submit (jobs.<name>.main(argv),
# their options in sbert_pipeline.jobs.parsers.<name>).
JOB_COMMANDS = dict(
    sorted(
        {
            **stage_cli.stage_commands(),
            "run": "run a whole job from a config: its stages, then a report",
            "submit": "run a job from a YAML config on Dataflow, Spark or Flink",
        }.items()
    )
)
# Errors a user can fix from the message alone: printed as one line, exit status 2 (a stage
# refusing a run over its memory budget or the free disk names the size and what to change).
USER_ERRORS = (
    ResourceError,
    ModelLoadError,
    DataFileError,
    FileExistsError,
    FileNotFoundError,
    ValueError,
    TypeError,
)
# Options of `sbert` itself, accepted before or after the command name (up to a `--`).
VERBOSE_FLAGS = ("-v", "--verbose")
QUIET_FLAGS = ("-q", "--quiet")
_BEAM_DOFN_ERROR_LOGGER = "apache_beam.runners.common"
_BEAM_SUBPROCESS_LOGGER = "apache_beam.utils.subprocess_server"
# The handlers stops_raise replaces: Python's own (a signal the parent ignores stays ignored).
_DEFAULT_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
# How long a dropped stop waits before it is sent again (see _StopRelay).
_RESEND_DELAY_S = 0.05


def build_parser() -> argparse.ArgumentParser:
    """The ``sbert`` parser with every sub-command registered (the commands' own options are
    parsed by their own parsers)."""
    from sbert_pipeline.jobs import encode_file, eval_pairs, eval_sts

    # Its sub-command parsers (encode, eval) are CommandParsers too: defaults shown.
    parser = CommandParser(
        prog="sbert",
        description="Sentence-BERT batch jobs. 'sbert COMMAND --help' shows a command's "
        "options. More: docs/commands.md",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sbert-pipeline {__version__}")
    parser.add_argument(
        *VERBOSE_FLAGS, action="store_true", help="log progress details (also after COMMAND)"
    )
    parser.add_argument(
        *QUIET_FLAGS, action="store_true", help="log errors only (also after COMMAND)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, summary in JOB_COMMANDS.items():
        commands.add_parser(name, help=summary, add_help=False)
    encode_file.add_parser(commands)
    evaluate = commands.add_parser(
        "eval",
        help="evaluate a model",
        description="Evaluate a model on a file of sentence pairs. More: docs/commands.md#eval",
        formatter_class=HelpFormatter,
    ).add_subparsers(dest="evaluation", required=True, metavar="EVALUATION")
    eval_sts.add_parser(evaluate)
    eval_pairs.add_parser(evaluate)
    return parser


def split_global_flags(argv: list[str]) -> tuple[int, list[str]]:
    """Take ``-v``/``--verbose`` and ``-q``/``--quiet`` out of ``argv`` wherever they stand
    before a ``--``; returns the log level they ask for and the other arguments in order."""
    level = logging.WARNING
    rest: list[str] = []
    for position, arg in enumerate(argv):
        if arg == "--":
            rest.extend(argv[position:])
            break
        if arg in VERBOSE_FLAGS:
            level = logging.INFO
        elif arg in QUIET_FLAGS:
            level = logging.ERROR
        else:
            rest.append(arg)
    return level, rest


def _configure_logging(level: int) -> None:
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if level > logging.INFO:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_not_beam_noise)


def _not_beam_noise(record: logging.LogRecord) -> bool:
    """False for what Beam logs that the job says better (shown with -v): an exception raised
    in a DoFn, logged with its traceback before the runner re-raises it (the job reports it in
    one line, or in full if unexpected), and the Spark or Flink job server's start and stop,
    each a WARNING holding its whole Java command line."""
    if record.name == _BEAM_DOFN_ERROR_LOGGER:
        return False
    return not (
        record.name == _BEAM_SUBPROCESS_LOGGER
        and str(record.msg).startswith(("Really starting service", "Really destroying service"))
    )


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """The ``--long`` flags of a command's parser, hidden (old) spellings and the ``--no-``
    forms of switches left out (a close match names the switch once)."""
    flags = set(getattr(parser, "flags", []))
    return sorted(
        flag for flag in flags if not (flag.startswith("--no-") and f"--{flag[5:]}" in flags)
    )


def check_command_args(command: str, argv: list[str]) -> None:
    """Parse ``argv`` with the command's light parser: ``--help`` and option errors exit here,
    before torch and Beam load; options nobody knows raise with their close matches.

    Raises:
        ValueError: an unknown option or stray argument (``UnknownOptionError`` for Beam jobs).
    """
    if stage_cli.is_stage_command(command):
        parser = stage_cli.build_parser(command)
    else:
        parser = importlib.import_module(f"sbert_pipeline.jobs.parsers.{command}").build_parser()
    _, extra = parser.parse_known_args(argv)
    if not extra:
        return
    if stage_cli.runs_pipelines(command):
        from sbert_pipeline.stage_api.beam_options import check_beam_args

        check_beam_args(extra, option_strings(parser))
        return
    problems = []
    for arg in extra:
        name = arg.split("=", 1)[0]
        matches = difflib.get_close_matches(name, option_strings(parser), n=3, cutoff=0.6)
        hint = f" (did you mean {' or '.join(matches)}?)" if matches else ""
        problems.append(f"unknown option {name}{hint}" if name.startswith("-") else repr(arg))
    raise ValueError(f"sbert {command}: unrecognized arguments: {'; '.join(problems)}")


@contextlib.contextmanager
def stops_raise(deadline: StopDeadline | None = None) -> Iterator[None]:
    """While the command runs, Ctrl-C raises ``KeyboardInterrupt`` and SIGTERM raises
    :class:`Terminated` in the main thread, and neither stop is lost: the cleanup a stop needs
    (``finally`` blocks, the folder's lock, undoing an interrupted commit) runs, instead of the
    process dying mid-step without a word. Only Python's default handlers are replaced (an
    ignored signal stays ignored), and they are put back after. Outside the main thread, where
    Python takes no signals, nothing changes.

    ``deadline``: closed when the command is over; one a stop started still ends the process.
    """
    if not _in_main_thread():
        yield
        return
    replaced = {
        signum: signal.signal(signum, _raise_stop)
        for signum, default in _DEFAULT_HANDLERS.items()
        if signal.getsignal(signum) is default
    }
    relay = _StopRelay(sys.unraisablehook)
    sys.unraisablehook = relay.hook
    try:
        yield
    finally:
        relay.stop()
        sys.unraisablehook = relay.previous_hook
        for signum, handler in replaced.items():
            signal.signal(signum, handler)
        note_stop(None)
        if deadline is not None:
            deadline.close()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _raise_stop(signum: int, frame) -> None:
    stop = KeyboardInterrupt() if signum == signal.SIGINT else Terminated("SIGTERM")
    note_stop(stop)  # raised again before the next pipeline if library code swallows it
    raise stop


@dataclass
class _StopRelay:
    """Sends a stop again that Python dropped.

    A signal handler's exception raised inside a weakref callback or a ``__del__`` (frequent
    while modules import) cannot propagate: Python prints "Exception ignored" and the job runs
    on. The stop is sent again from another thread a moment later, to land in the command's own
    code (sent from the hook itself, the handler would raise inside the hook, dropped again).
    """

    previous_hook: Callable
    active: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def stop(self) -> None:
        """Send nothing more: the command is over (a stop sent just before still lands)."""
        with self._lock:
            self.active = False

    def hook(self, unraisable) -> None:
        """``sys.unraisablehook``: a dropped stop is sent again, anything else reported."""
        stop = unraisable.exc_value
        if not isinstance(stop, (KeyboardInterrupt, Terminated)):
            self.previous_hook(unraisable)
            return
        signum = signal.SIGINT if isinstance(stop, KeyboardInterrupt) else signal.SIGTERM
        timer = threading.Timer(_RESEND_DELAY_S, self._resend, (signum,))
        timer.daemon = True
        timer.start()

    def _resend(self, signum: int) -> None:
        # Under the lock: a signal sent after the command is over would find the handlers
        # put back (SIGTERM's default ends the process silently).
        with self._lock:
            if self.active:
                os.kill(os.getpid(), signum)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen command; returns the process exit status."""
    argv_given = argv
    argv = sys.argv[1:] if argv is None else list(argv)
    # What is alive when the process ends is freed with it: freezing it at exit spares the
    # interpreter's last collections a walk over every object torch and Beam made (about half a
    # CPU-second once torch is loaded). Registered once however often main runs.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
    return_freed_arrow_memory_at_once()  # before pyarrow is imported; budgets count RSS
    level, rest = split_global_flags(argv)
    _configure_logging(level)
    # Called with no arguments, main is the process's command (the `sbert` script, `python -m
    # sbert_pipeline.jobs.cli`): a stop ends the process within STOP_DEADLINE_S, however busy it
    # is. Not for a caller that passes its own arguments (a test, a library): that process is not
    # ours to end.
    deadline = StopDeadline() if argv_given is None and _in_main_thread() else None
    try:
        with stops_raise(deadline):
            return _run_command(rest)
    except USER_ERRORS as err:
        print(f"sbert: error: {err}", file=sys.stderr)
        return 2
    except JobFailedError as err:
        print(f"sbert: job failed: {err}", file=sys.stderr)
        return 1
    except (Exception, KeyboardInterrupt, Terminated) as err:
        stop = user_stop(err)  # Ctrl-C, SIGTERM, a full disk, a read-only output
        if stop is None:
            raise
        print(stop.line(), file=sys.stderr, flush=True)
        if deadline is not None:
            deadline.reported()
        return stop.status


def _run_command(rest: list[str]) -> int:
    if rest and rest[0] in JOB_COMMANDS:
        check_command_args(rest[0], rest[1:])
        if stage_cli.is_stage_command(rest[0]):
            return stage_cli.main(rest[0], rest[1:])
        return importlib.import_module(f"sbert_pipeline.jobs.{rest[0]}").main(rest[1:])
    args = build_parser().parse_args(rest)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
