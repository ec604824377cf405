"""The in-memory API: ``deduplicate(data, ...)`` runs a pandas DataFrame, a pyarrow Table or a
list of texts through the embed, pairs and dedup stages and returns the rows kept, the rows
removed (with the row each duplicates) and the groups (``deduplicate_rows.py``).

Above the stages, as ``jobs`` is: it calls their ``run`` with their ``Options``, so what the
commands do with their defaults, it does. The stages, and Beam with them, load when
``deduplicate`` or ``Deduplicated`` is first asked for, not when this package is imported.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Deduplicated", "deduplicate"]


def __getattr__(name: str) -> Any:
    """``deduplicate`` and ``Deduplicated``, imported when first asked for."""
    if name in __all__:
        from sbert_pipeline.in_memory import deduplicate_rows

        return getattr(deduplicate_rows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
