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
import signal
import threading
from dataclasses import dataclass

from sbert_pipeline.stage_api.stops import Terminated, cause_chain, stop_signal

# What the machine, not the job, ran out of or refused: freeing space or choosing a writable
# folder and rerunning fixes it.
ENVIRONMENT_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
# The exit statuses of a shell whose command died of SIGINT and SIGTERM (128 + signal number).
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
# A full disk or a read-only output fails the run like any other failed job.
EXIT_ENVIRONMENT = 1
# From a stop signal to the end of the process at most (StopDeadline): the stop's own cleanup
# (finally blocks, undoing an interrupted commit) takes well under a second; what it cannot
# finish by then, the next run clears.
STOP_DEADLINE_S = 2.5
# The signals whose number on the wakeup file descriptor starts the deadline.
_STOPS = frozenset({signal.SIGINT, signal.SIGTERM})
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


class StopDeadline:
    """Ends the process :data:`STOP_DEADLINE_S` after Ctrl-C or SIGTERM, whatever it is doing.

    Python runs a signal's handler in the main thread between two bytecodes, so the stop waits
    for whatever the main thread is in: a forward pass or tokenising a large batch, a Beam step
    in C, or, once the command has reported the stop, the interpreter's exit (joining library
    threads, freeing a large run's millions of objects), which took most of the 45 s seen at
    2M texts. The C-level handler writes each signal's number to the wakeup file descriptor at
    once, in whichever thread takes it; a thread reading that pipe starts the deadline, and when
    it passes the process prints the stop's one line (unless the command already did) and ends
    with the stop's exit status. The lock on the output folder is the kernel's and goes with the
    process; the attempt area is left for the next run to clear, as after SIGKILL
    (``pipelines/io/output_dir.py``). Only for a process that is the command: never in a
    process that called ``sbert`` as a library.
    """

    def __init__(self, seconds: float = STOP_DEADLINE_S) -> None:
        self.seconds = seconds
        self._reported = threading.Event()
        self._armed = threading.Event()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # the C handler must never block on it
        self._previous_fd = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
        threading.Thread(target=self._watch, name="sbert-stop-deadline", daemon=True).start()

    def reported(self) -> None:
        """The command printed the stop's line itself: the deadline only ends the process."""
        self._reported.set()

    def close(self) -> None:
        """The command is over: signals no longer start the deadline (one started still runs,
        so that the interpreter's exit after a stop is bounded too)."""
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._write_fd)  # the watcher reads end-of-file and returns

    def _watch(self) -> None:
        try:
            while data := os.read(self._read_fd, 64):
                signums = [number for number in data if number in _STOPS]
                if signums and not self._armed.is_set():
                    self._armed.set()
                    timer = threading.Timer(self.seconds, self._expire, (signums[0],))
                    timer.daemon = True
                    timer.start()
        finally:
            os.close(self._read_fd)

    def _expire(self, signum: int) -> None:
        stop = user_stop(KeyboardInterrupt() if signum == signal.SIGINT else Terminated())
        if not self._reported.is_set():
            # os.write: the main thread may hold sys.stderr's lock mid-write.
            os.write(2, f"{stop.line()}\n".encode())
        os._exit(stop.status)
