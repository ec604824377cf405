"""How dedup's warnings name its options: as the command's flags (``--threshold``), or, when
``deduplicate()`` runs the stage, as that function's keyword arguments (``threshold=``).

A context variable, as the digest check of the inputs is set around a run: the stage's own
``run(options)`` stays the same for every caller. Beam-free.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_AS_KEYWORDS: ContextVar[bool] = ContextVar("dedup_options_as_keywords", default=False)


def option_name(name: str) -> str:
    """``--threshold`` for the field ``threshold``, or ``threshold=`` inside
    :func:`keyword_names`."""
    return f"{name}=" if _AS_KEYWORDS.get() else f"--{name.replace('_', '-')}"


def named_as_keywords() -> bool:
    """Whether the caller named the options as keyword arguments (:func:`keyword_names`)."""
    return _AS_KEYWORDS.get()


@contextmanager
def keyword_names() -> Iterator[None]:
    """Name the options as keyword arguments in what dedup says inside the block."""
    token = _AS_KEYWORDS.set(True)
    try:
        yield
    finally:
        _AS_KEYWORDS.reset(token)
