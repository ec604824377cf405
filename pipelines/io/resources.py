"""The process's memory budget and the temporary disk a stage may use: read, checked before a
stage starts, and measured (peak RSS) after it. Beam-free and numpy-free.

One budget holds for the whole process (``--memory-budget``, ``sbert run``'s top-level
``memory_budget``): ``auto`` is :data:`AUTO_SHARE` of the memory available when the stage starts
(``MemAvailable`` of ``/proc/meminfo``: free memory plus what the kernel can reclaim). A stage
works out what it needs from its inputs' sizes *before* it reads them, and
:func:`require_memory` / :func:`require_disk` refuse with the size needed and what to change,
so a job that cannot fit fails in its first second instead of after an hour (see
``docs/architecture.md``, "Memory budget, temporary disk and stops").
"""

from __future__ import annotations

import os
import resource
import shutil
from dataclasses import dataclass

from sbert_pipeline.io.sizes import format_size, parse_size

AUTO = "auto"
# The share of the available memory ``auto`` takes: the rest is headroom for the page cache
# the stages' reads live on and for other processes on the machine.
AUTO_SHARE = 0.8


class ResourceError(RuntimeError):
    """A stage would need more memory or temporary disk than it may use. The message names
    what needs it, how much, the limit, and what to change."""


@dataclass(frozen=True)
class MemoryBudget:
    """A resolved memory budget: ``bytes`` and where it came from (``--memory-budget 4GB`` or
    ``auto: 80% of 12.3 GiB available``), for messages and manifests."""

    bytes: int
    source: str

    def to_json(self) -> dict:
        """``{"bytes": ..., "source": ...}`` for a manifest."""
        return {"bytes": self.bytes, "source": self.source}


def available_memory() -> int:
    """Bytes of memory available to a new allocation now: ``MemAvailable`` of
    ``/proc/meminfo``, else free pages (other systems)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def total_memory() -> int:
    """Bytes of physical memory of the machine."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def resolve_budget(text: str | int | None) -> MemoryBudget:
    """The budget ``--memory-budget`` asks for: a size (``4GB``, ``512MiB``) or ``auto`` / None
    (:data:`AUTO_SHARE` of :func:`available_memory`).

    Raises:
        ValueError: not a size, or more than the machine's physical memory (a typo such as
            ``40TB`` would otherwise disable every check).
    """
    if text is None or (isinstance(text, str) and text.strip().lower() == AUTO):
        available = available_memory()
        return MemoryBudget(
            int(available * AUTO_SHARE),
            f"auto: {AUTO_SHARE:.0%} of {format_size(available)} available",
        )
    size = parse_size(text)
    total = total_memory()
    if size > total:
        raise ValueError(
            f"{text} is more than this machine's {format_size(total)} of memory; give at most "
            f"that, or 'auto' ({AUTO_SHARE:.0%} of the memory available when the stage starts)"
        )
    return MemoryBudget(size, f"--memory-budget {text}")


def require_memory(needed: int, budget: MemoryBudget, what: str, change: str) -> None:
    """Refuse before starting when ``what`` needs more than the budget.

    ``what`` says what takes the memory and how it was counted (``"2,000,000 vectors of 384
    float32 (one block of the search plus the index)"``); ``change`` says how to need less
    (``"use --factory IVF4096,PQ48 or more --shards"``).
    """
    if needed > budget.bytes:
        raise ResourceError(
            f"{what} needs {format_size(needed)} of memory, more than the budget of "
            f"{format_size(budget.bytes)} ({budget.source}); raise --memory-budget to at least "
            f"{format_size(needed)}, or {change}"
        )


def free_disk(path: str) -> int:
    """Bytes free to this user on the file system of ``path`` (or of its nearest existing
    parent: the output folder may not exist yet)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    return shutil.disk_usage(probe).free


def require_disk(needed: int, path: str, what: str, change: str) -> None:
    """Refuse before starting when ``what`` needs more temporary disk under ``path`` than is
    free there (one :class:`ResourceError` naming both sizes and the folder)."""
    free = free_disk(path)
    if needed > free:
        raise ResourceError(
            f"{what} needs {format_size(needed)} of temporary disk under {path}, but only "
            f"{format_size(free)} is free there; free some space, or {change}"
        )


def resident_bytes() -> int:
    """The process's resident memory now, in bytes (``/proc/self/statm``); elsewhere the peak
    so far (:func:`peak_rss`), which is never less. After an earlier stage of ``sbert run`` the
    peak says nothing about what is still held: a stage that adds its need to what the process
    holds counts from this."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return peak_rss()
    return pages * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """The process's peak resident memory so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def release_free_memory() -> None:
    """Hand memory the process has freed back to the system, so that the next stage of the
    same ``sbert run`` counts what is still held (:func:`resident_bytes`), not what a finished
    stage freed: pyarrow's pool keeps freed buffers for reuse, and glibc keeps freed heap
    blocks (an IVF index's lists below its mmap threshold). Elsewhere than glibc, only the
    pyarrow pool is released."""
    import contextlib
    import ctypes
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing more to ask
        ctypes.CDLL("libc.so.6").malloc_trim(0)


# mimalloc (pyarrow's default pool) keeps pages it freed until a later allocation purges them;
# reading 2M vectors left ~0.6 GiB resident that no stage held, and the index stage's fill went
# 0.35 GiB over its budget (benchmarks/results/scale_job_n2000000.json). With a purge delay of 0
# freed pages go back at once (reading cost +10% wall time, hidden behind FAISS in every stage).
ARROW_PURGE_SETTING = ("MIMALLOC_PURGE_DELAY", "0")


def return_freed_arrow_memory_at_once() -> bool:
    """Ask pyarrow's allocator to hand freed pages back to the system at once, so that what
    the process holds is what it uses (the memory budget counts resident bytes).

    mimalloc reads its settings when pyarrow is first imported: call this first. A user's own
    ``MIMALLOC_PURGE_DELAY`` is kept. Returns whether the setting will take effect (False when
    pyarrow is already imported)."""
    import sys

    if "pyarrow" in sys.modules:
        return False
    name, value = ARROW_PURGE_SETTING
    os.environ.setdefault(name, value)
    return True
