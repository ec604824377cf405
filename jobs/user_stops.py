"""The stops a user causes (Ctrl-C, SIGTERM, a full disk, a read-only output), as the CLI
reports them; the stop signals themselves and ``JobFailedError`` are in
``pipelines/stage_api/stops.py``.

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

from pipelines.stage_api.stops import Terminated, cause_chain, stop_signal

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
