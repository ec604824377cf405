"""The previous version of a stage's own output, for an incremental run (``--incremental``).

A stage downstream of embed that runs with ``incremental`` reads its output folder's published
manifest before it prepares the folder, checks that the previous version was made by the same
stage from vectors of the same model, and reuses what it can (docs/architecture.md,
"Incremental runs"). Each stage records what it did in its manifest's ``incremental`` section,
in one shape for every stage::

    {"mode": "full", "reason": "..."}
    {"mode": "incremental", "previous_created": ..., "rows_old": N, "rows_new": N,
     "rows_gone": N, "reused": [...], "recomputed": [...], "seconds": ...}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sbert_pipeline.io.embeddings import IncompatibleEmbeddingsError, require_compatible
from sbert_pipeline.io.output_dir import CorruptOutputError, read_manifest

logger = logging.getLogger(__name__)

NOT_ASKED = "--incremental is off"


def full_run(stage: str, output: str, reason: str) -> dict:
    """The ``incremental`` section of a full run, logged once (at INFO) with its reason."""
    if reason != NOT_ASKED:
        logger.info("%s: full run into %s: %s", stage, output, reason)
    return {"mode": "full", "reason": reason}


def incremental_record(
    previous: Mapping,
    *,
    rows: tuple[int, int, int],
    reused: list[str],
    recomputed: list[str],
    seconds: float,
) -> dict:
    """The ``incremental`` section of an incremental run; ``rows`` is (old, new, gone)."""
    old, new, gone = rows
    return {
        "mode": "incremental",
        "previous_created": previous.get("created"),
        "rows_old": int(old),
        "rows_new": int(new),
        "rows_gone": int(gone),
        "reused": reused,
        "recomputed": recomputed,
        "seconds": round(seconds, 3),
    }


def previous_output(directory: str, kind: str) -> tuple[dict | None, str]:
    """The published manifest of ``directory`` when it is a complete output of ``kind``
    (files checked against it), else ``(None, why not)``."""
    try:
        manifest = read_manifest(directory)
    except FileNotFoundError:
        return None, f"{directory} holds no previous output"
    except CorruptOutputError as err:
        return None, f"the previous output is unreadable ({err})"
    if manifest.get("kind") != kind:
        return None, f"{directory} holds {manifest.get('kind')!r}, not {kind!r}"
    return manifest, ""


def model_change(previous: Mapping, current: Mapping) -> str | None:
    """Why vectors of the embeddings manifest ``current`` cannot join those of ``previous``
    (another model, prompt, dimension, normalisation or dtype), or None when they can."""
    try:
        require_compatible(previous, current, "the previous and the current embeddings")
    except IncompatibleEmbeddingsError as err:
        return f"the model changed: {err}"
    if previous.get("dtype") != current.get("dtype"):
        return f"the dtype changed: {previous.get('dtype')!r} vs {current.get('dtype')!r}"
    return None
