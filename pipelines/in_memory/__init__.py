"""The in-memory API: ``deduplicate(data, ...)`` runs a pandas DataFrame, a pyarrow Table or a
list of texts through the embed, pairs and dedup stages and returns the rows kept, the rows
removed (with the row each duplicates) and the groups (``deduplicate.py``).

Above the stages, as ``jobs`` is: it calls their ``run`` with their ``Options``, so what the
commands do with their defaults, it does.
"""

from sbert_pipeline.in_memory.deduplicate import Deduplicated, deduplicate

__all__ = ["Deduplicated", "deduplicate"]
