"""Errors of job runs (as opposed to bad options, which raise ValueError and friends), and the
stops a user causes: Ctrl-C, SIGTERM, a full disk, a read-only output.

A stop is reported in one line with its own exit status (:func:`user_stop`). Beam re-raises what
a pipeline step raised wrapped (a ``RuntimeError`` whose message holds the original type and
message, the original kept as its ``__context__``), so the cause chain is walked first and the
message read only for what Beam flattened into text (a worker in another process, a step error
rebuilt from its message).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

# What the machine, not the job, ran out of or refused: freeing space or choosing a writable
# folder and rerunning fixes it.
ENVIRONMENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# The exit statuses of a shell whose command died of SIGINT and SIGTERM (128 + signal number).
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
# A full disk or a read-only output fails the run like any other failed job.
EXIT_ENVIRONMENT = 1
# The promise of the staged commit (pipelines/io/output_dir.py): a run that stops before its
# commit has written only under OUTPUT/_attempts/<run id>/.
UNCHANGED = "the running stage published nothing and its previous output is unchanged"
# How an OSError reads once flattened into text: "[Errno 28] No space left on device: 'path'".
_ERRNO_TEXT = re.compile(r"\[errno (\d+)\][^:\[\]]*(?:: '([^']*)')?", re.IGNORECASE)
# How Beam names a KeyboardInterrupt, which it cannot rebuild: "KeyboardInterrupt [while running
# 'Step']", or a line of a worker process's traceback. (Only this process raises Terminated.)
_INTERRUPT_TEXT = re.compile(r"(?m)(?:^|: )KeyboardInterrupt\b")


class JobFailedError(RuntimeError):
    """The job ran but its result is not acceptable (rows lost, error rate); no manifest."""


class Terminated(BaseException):
    """The process was sent SIGTERM (raised by the handler ``sbert`` installs).

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that no ``except Exception`` on the way
    up (a step that dead-letters what fails, a stage runner that records a failure) takes a stop
    for an error; ``finally`` blocks and context managers still run, the folder's lock is
    released and an interrupted commit is undone.
    """


# The stop a signal raised during the command, until the command ends (see note_stop).
_pending: list[BaseException] = []


def note_stop(stop: BaseException | None) -> None:
    """Remember the stop a signal handler raises (None: forget it, the command is over).

    Library code that swallows whatever it catches (a bare ``except:`` around an optional
    import) can lose the exception; :func:`raise_pending_stop` raises it again.
    """
    _pending[:] = [] if stop is None else [stop]


def raise_pending_stop() -> None:
    """Raise again a stop that was signalled during this command, if any.

    Called where nothing is half done, before a pipeline starts: a stop that reached the CLI
    ended the command long before, so only one that was swallowed on its way is raised here.
    """
    if _pending:
        raise type(_pending[0])(*_pending[0].args)


@dataclass(frozen=True)
class UserStop:
    """A stop the user caused: the line to print and the exit status."""

    message: str
    status: int
    advice: str = ""

    def line(self) -> str:
        """The one line ``sbert`` prints on stderr."""
        advice = f"; {self.advice}" if self.advice else ""
        return f"sbert: {self.message}; {UNCHANGED}{advice} (exit status {self.status})"


def stop_signal(err: BaseException) -> BaseException | None:
    """The ``KeyboardInterrupt`` or :class:`Terminated` behind ``err``, or None.

    Found in ``err``'s cause chain, or rebuilt from Beam's text when the chain lost it (a Ctrl-C
    reaches the workers of a multi-process runner too).
    """
    for link in cause_chain(err):
        if isinstance(link, (KeyboardInterrupt, Terminated)):
            return link
    return KeyboardInterrupt() if _INTERRUPT_TEXT.search(str(err)) else None


def user_stop(err: BaseException) -> UserStop | None:
    """The one-line report of a stop the user caused, or None for any other failure.

    Ctrl-C and SIGTERM, and an ``OSError`` of a full disk (or quota) or a read-only file system
    anywhere in the cause chain, or flattened into Beam's message.
    """
    stop = stop_signal(err)
    if isinstance(stop, KeyboardInterrupt):
        return UserStop("interrupted by Ctrl-C (SIGINT)", EXIT_INTERRUPTED)
    if isinstance(stop, Terminated):
        return UserStop("stopped by SIGTERM", EXIT_TERMINATED)
    found = _environment_error(err)
    if found is None:
        return None
    code, path = found
    what = os.strerror(code)
    where = f" ({path})" if path else ""
    # A rerun first clears what this run left under _attempts/, so freed space is enough.
    advice = "write to a writable folder" if code == errno.EROFS else "free space and rerun"
    return UserStop(f"stopped: {what[0].lower()}{what[1:]}{where}", EXIT_ENVIRONMENT, advice)


def cause_chain(err: BaseException) -> list[BaseException]:
    """``err`` and every exception it was raised from or while handling, each once."""
    chain: list[BaseException] = []
    link: BaseException | None = err
    while link is not None and not any(link is seen for seen in chain):
        chain.append(link)
        link = link.__cause__ or link.__context__
    return chain


def _environment_error(err: BaseException) -> tuple[int, str | None] | None:
    """(errno, path or None) of a full disk or read-only file system behind ``err``."""
    for link in cause_chain(err):
        if isinstance(link, OSError) and link.errno in ENVIRONMENT_ERRNOS:
            return link.errno, link.filename
    for link in cause_chain(err):
        for code, path in _ERRNO_TEXT.findall(str(link)):
            if int(code) in ENVIRONMENT_ERRNOS:
                return int(code), path or None
    return None
