"""Byte sizes as people write them (``4GB``, ``512 MiB``) and back."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from a human size: ``"4GB"`` (10^9), ``"512MiB"`` (2^20), ``"2G"`` (2^30), ``1024``.

    KB/MB/GB/TB are decimal, KiB/MiB/GiB/TiB and the bare K/M/G/T are binary (as in ``sort -S``
    and ``java -Xmx``).

    Raises:
        ValueError: not a positive size with a known unit.
    """
    if isinstance(text, int):
        value, unit = float(text), ""
    else:
        match = _SIZE.match(text)
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(
                f"cannot read the size {text!r}: write a number with an optional unit such as "
                "4GB, 512MiB or 2G"
            )
        value, unit = float(match.group(1)), match.group(2).lower()
    size = int(value * _UNITS[unit])
    if size <= 0:
        raise ValueError(f"a memory size must be positive, got {text!r}")
    return size


def format_size(n_bytes: float) -> str:
    """``1_932_735_283`` -> ``"1.80 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n_bytes) < 1024:
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.2f} {unit}"
        n_bytes /= 1024
    return f"{n_bytes:.2f} TiB"
