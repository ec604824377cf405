"""Shard assignment that every process agrees on."""

from __future__ import annotations

import zlib


def stable_bucket(key: str, n: int) -> int:
    """A bucket in ``[0, n)`` that is the same in every process (``hash()`` is salted)."""
    return zlib.crc32(key.encode("utf-8")) % n
