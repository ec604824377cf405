"""Beam transforms for the SBERT pipeline stages, and the Beam-free helpers they wrap.

``from sbert_pipeline import deduplicate`` is the in-memory API (a DataFrame, a pyarrow Table
or a list of texts through embed, pairs and dedup; ``in_memory/``), loaded when first used.
"""

from __future__ import annotations

import logging
from typing import Any

# Beam's optional BigQuery client logs this on the root logger when it is imported without its
# extra, which any Beam I/O import does; nothing here uses BigQuery. A filter on the root logger
# drops that one record only: it sees records logged on the root logger itself, never those of
# named loggers (ours), which reach the root's handlers without passing its filters.
_BEAM_IMPORT_NOISE = "apitools not found"


class _DropBeamImportNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_BEAM_IMPORT_NOISE)


def _drop_beam_import_noise() -> None:
    root = logging.getLogger()
    if not any(isinstance(f, _DropBeamImportNoise) for f in root.filters):
        root.addFilter(_DropBeamImportNoise())


_drop_beam_import_noise()


def __getattr__(name: str) -> Any:
    """``deduplicate`` and ``Deduplicated``, imported when first asked for (pandas, pyarrow)."""
    if name in ("deduplicate", "Deduplicated"):
        from sbert_pipeline import in_memory

        return getattr(in_memory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
