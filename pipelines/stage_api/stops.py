"""A failed stage run, and the stops a user causes (Ctrl-C, SIGTERM) as a stage sees them.

A stop is a ``BaseException`` so no ``except Exception`` on its way up takes it for an error.
Beam re-raises what a pipeline step raised wrapped (a ``RuntimeError`` whose message holds the
original type and message, the original kept as its ``__context__``), so :func:`stop_signal`
walks the cause chain first and reads the message only for what Beam flattened into text. The
CLI turns these into one line and an exit status.
"""

from __future__ import annotations

import re

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


def stop_signal(err: BaseException) -> BaseException | None:
    """The ``KeyboardInterrupt`` or :class:`Terminated` behind ``err``, or None.

    Found in ``err``'s cause chain, or rebuilt from Beam's text when the chain lost it (a Ctrl-C
    reaches the workers of a multi-process runner too).
    """
    for link in cause_chain(err):
        if isinstance(link, (KeyboardInterrupt, Terminated)):
            return link
    return KeyboardInterrupt() if _INTERRUPT_TEXT.search(str(err)) else None


def cause_chain(err: BaseException) -> list[BaseException]:
    """``err`` and every exception it was raised from or while handling, each once."""
    chain: list[BaseException] = []
    link: BaseException | None = err
    while link is not None and not any(link is seen for seen in chain):
        chain.append(link)
        link = link.__cause__ or link.__context__
    return chain
