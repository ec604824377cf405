"""Progress of the long local loops: a tqdm bar on a terminal, a plain line every 30 s elsewhere.

A stage reports what it has done (texts embedded, tiles scanned, k-means iterations, vectors
added) through a :class:`Progress`; it never decides how that is shown. Progress is off until
the job turns it on for this process (:func:`enable_progress`, called by
:func:`show_progress_unless_quiet` on a local runner without ``--quiet``), so library users and
remote workers see nothing: a Beam worker in another process (``--direct_running_mode
multi_processing``, Dataflow, Spark, Flink) never had it turned on, and a forked child does not
inherit it.

On stderr as a terminal the bar is tqdm's (count, rate, and with a total the fraction and
ETA). Otherwise (a log file, CI, a flex-template launcher) one line such as::

    embed: 12,288/100,000 texts (12.3%), 410 texts/s, ETA 3m34s

is written every ``interval`` seconds, and nothing at the end: the job's own summary follows.

Call it per batch, tile or iteration, never per row: an update takes a lock and reads a clock.

Example:
    >>> with stage_progress("k-means", total=20, unit="iterations") as bar:
    ...     for _ in range(20):
    ...         step()
    ...         bar.update()
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from tqdm import tqdm

# Seconds between plain lines when the stream is not a terminal.
PLAIN_INTERVAL = 30.0
# The shared bar of the embed stage: the reader adds each file's records to its total, the
# model handler counts the texts it embedded.
EMBED_PROGRESS = "embed"


@dataclass
class _Setting:
    """Whether (and how) this process shows progress; see :func:`enable_progress`."""

    pid: int | None = None  # the process that turned progress on; None: off
    stream: TextIO | None = None  # None: sys.stderr at the time a bar is created
    interval: float = PLAIN_INTERVAL
    clock: Callable[[], float] = time.monotonic
    shared: dict[str, Progress] = field(default_factory=dict)


_SETTING = _Setting()
_SHARED_LOCK = threading.Lock()
# Rows that this thread's forward passes counted since its last settle_rows call.
_FORWARDED = threading.local()


def enable_progress(
    on: bool = True,
    *,
    stream: TextIO | None = None,
    interval: float = PLAIN_INTERVAL,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Turn progress on (or off) for this process and start afresh: shared bars are closed.

    Args:
        on: show progress in this process (not in processes it forks).
        stream: where to write (default: ``sys.stderr`` as it is when a bar is created).
        interval: seconds between plain lines when ``stream`` is not a terminal.
        clock: seconds, monotonic (tests pass a fake one).

    Raises:
        ValueError: a negative ``interval``.
    """
    if interval < 0:
        raise ValueError(f"interval must be >= 0 seconds, got {interval}")
    close_shared_progress()
    _SETTING.pid = os.getpid() if on else None
    _SETTING.stream, _SETTING.interval, _SETTING.clock = stream, interval, clock


def show_progress_unless_quiet(here: bool = True) -> None:
    """Show progress where the user watches the terminal: when the stage runs ``here`` (in
    this process, or on a local runner), unless ``--quiet`` raised the log level above WARNING.
    Then the long loops draw bars and the stages' INFO lines are logged; otherwise progress is
    off. Bars left by an earlier job in this process are closed first."""
    quiet = logging.getLogger().getEffectiveLevel() > logging.WARNING
    on = here and not quiet
    enable_progress(on)
    if on:
        logging.getLogger("sbert_pipeline").setLevel(logging.INFO)


def progress_enabled() -> bool:
    """Whether this process shows progress."""
    return _SETTING.pid == os.getpid()


def stage_progress(description: str, total: int | None = None, unit: str = "it") -> Progress:
    """A new :class:`Progress` for one loop, shown if this process shows progress.

    Args:
        description: what is counted, first on the line (``"embed"``, ``"pairs"``).
        total: the count at the end, if known (then a fraction and an ETA are shown).
        unit: the plural noun of the count (``"texts"``, ``"tiles"``).
    """
    if not progress_enabled():
        return Progress(description, total, unit, enabled=False)
    return Progress(
        description,
        total,
        unit,
        stream=_SETTING.stream,
        interval=_SETTING.interval,
        clock=_SETTING.clock,
    )


def shared_progress(description: str, unit: str = "it", total: int | None = None) -> Progress:
    """The one :class:`Progress` named ``description`` in this process, made on first use
    (with ``unit`` and ``total``; later calls' are ignored).

    For work that Beam splits into bundles and DoFn instances (the embed stage, the pairs
    stage's query ranges): each reports to the same bar, and its total can grow as the inputs
    are read (:meth:`Progress.add_total`). It closes when its count reaches its total, else at
    :func:`close_shared_progress` (the embed job calls it when its pipeline has run) or when
    the next job turns progress on.
    """
    with _SHARED_LOCK:
        bar = _SETTING.shared.get(description) if progress_enabled() else None
        if bar is None:
            bar = stage_progress(description, total, unit)
            if bar.enabled:
                _SETTING.shared[description] = bar
        return bar


def close_shared_progress() -> None:
    """Close every shared bar (showing its final count) and forget it."""
    with _SHARED_LOCK:
        bars, _SETTING.shared = list(_SETTING.shared.values()), {}
    for bar in bars:
        bar.close()


def count_forward_rows(module, description: str, unit: str) -> None:
    """Count on the shared bar ``description`` the rows each forward pass of the torch
    ``module`` returns in this process, so that the bar moves inside one large batch of a
    caller that sees whole batches only; the caller then reports the batch with
    :func:`settle_rows`. Nothing is registered where this process shows no progress."""
    if not progress_enabled():
        return

    def count(_module, _inputs, output) -> None:
        shared_progress(description, unit).update(len(output))
        _FORWARDED.rows = getattr(_FORWARDED, "rows", 0) + len(output)

    module.register_forward_hook(count)


def settle_rows(description: str, unit: str, rows: int) -> None:
    """Count a finished batch of ``rows`` on the shared bar ``description``, less the rows this
    thread's forward passes counted since the last call (all of them, unless the model ran in
    another process, e.g. one shared by every process of a GPU worker)."""
    counted = getattr(_FORWARDED, "rows", 0)
    _FORWARDED.rows = 0
    if rows > counted:
        shared_progress(description, unit).update(rows - counted)


class Progress:
    """Counts done (and a total, if known) for one loop; shows them, or does nothing if off.

    Thread-safe: the pairs scan's workers update one bar. The clock starts at :meth:`start`
    (or the first :meth:`update`), so the rate and ETA hold from the first batch on when the
    loop calls ``start()`` (or enters the ``with`` block) before its first batch. The bar
    closes itself when the count reaches a known total.

    Args:
        description, total, unit: see :func:`stage_progress`.
        stream: where to write; a terminal gets a tqdm bar, anything else a plain line every
            ``interval`` seconds (default ``sys.stderr``).
        enabled: False makes every method a no-op.
        interval: seconds between plain lines.
        clock: seconds, monotonic, for the plain lines' rate and timing.
    """

    def __init__(
        self,
        description: str,
        total: int | None = None,
        unit: str = "it",
        *,
        stream: TextIO | None = None,
        enabled: bool = True,
        interval: float = PLAIN_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.description = description
        self.unit = unit
        self.enabled = enabled
        self._total = total
        self._stream = stream
        self._interval = interval
        self._clock = clock
        self._count = 0
        self._started: float | None = None
        self._last_line = 0.0
        self._bar: tqdm | None = None
        self._closed = False
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """Units done so far."""
        return self._count

    @property
    def total(self) -> int | None:
        """Units at the end, if known."""
        return self._total

    def start(self) -> None:
        """Start the clock (and show the empty bar on a terminal); later calls do nothing."""
        if not self.enabled:
            return
        with self._lock:
            self._start()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done."""
        if not self.enabled:
            return
        with self._lock:
            self._start()
            self._count += n
            if self._closed:
                return
            finished = bool(self._total) and self._count >= self._total
            if self._bar is not None:
                self._bar.update(n)
                if finished:
                    self._bar.close()
            else:
                now = self._clock()
                if now - self._last_line >= self._interval:
                    self._last_line = now
                    self._stream.write(self.line(now) + "\n")
                    self._stream.flush()
            self._closed = finished

    def add_total(self, n: int) -> None:
        """Grow the total by ``n`` (a total that was unknown starts at 0)."""
        if not self.enabled:
            return
        with self._lock:
            self._total = (self._total or 0) + n
            if self._bar is not None and not self._closed:
                self._bar.total = self._total
                self._bar.refresh()

    def line(self, now: float) -> str:
        """The plain line at time ``now`` (of this bar's clock): count, rate, fraction, ETA."""
        elapsed = now - (now if self._started is None else self._started)
        rate = self._count / elapsed if elapsed > 0 else 0.0
        done = f"{self._count:,}"
        if self._total:
            done += f"/{self._total:,} {self.unit} ({self._count / self._total:.1%})"
        else:
            done += f" {self.unit}"
        text = f"{self.description}: {done}, {_rate(rate)} {self.unit}/s"
        if self._total and rate > 0:
            text += f", ETA {_duration(max(self._total - self._count, 0) / rate)}"
        return text

    def close(self) -> None:
        """Finish: a bar is drawn a last time with its final count; a plain stream gets nothing."""
        if not self.enabled:
            return
        with self._lock:
            if self._bar is not None and not self._closed:
                self._bar.close()
            self._closed = True

    def __enter__(self) -> Progress:
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _start(self) -> None:
        """Under the lock: the clock, and the tqdm bar if the stream is a terminal."""
        if self._started is not None or self._closed:
            return
        self._started = self._last_line = self._clock()
        if self._stream is None:
            self._stream = sys.stderr
        isatty = getattr(self._stream, "isatty", None)
        if isatty is not None and isatty():
            self._bar = tqdm(
                total=self._total,
                desc=self.description,
                unit=f" {self.unit}",
                file=self._stream,
                dynamic_ncols=True,
                # A bar inside another (tiles of one query range) goes when done; the outer stays.
                leave=None,
            )


def _rate(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"


def _duration(seconds: float) -> str:
    """``42s``, ``3m34s``, ``2h05m``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
