"""What this process holds in memory now, for the stages' whole-process memory counts.

Beam-free and numpy-free (``pipelines.vectors`` imports no other package). ``peak_rss``
(``pipelines.io.resources``) is the high-water mark, which after
an earlier stage of ``sbert run`` says nothing about what is still held; a stage that counts
what it will add to what the process already holds needs the resident size now.
"""

from __future__ import annotations

import os
import resource

FLOAT32_BYTES = 4


def resident_bytes() -> int:
    """The process's resident memory now, in bytes (``/proc/self/statm``); elsewhere the peak
    so far, which is never less."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux-style KiB
    return pages * os.sysconf("SC_PAGE_SIZE")


def vector_bytes(rows: int, dim: int) -> int:
    """Bytes of ``rows`` float32 vectors of dimension ``dim``."""
    return FLOAT32_BYTES * rows * dim
