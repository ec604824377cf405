"""The manifest fields every stage writes the same way: the model fields copied from the
embeddings manifest, the software versions and the creation time (docs/architecture.md,
folder contracts).

Beam's version is read from the installed distribution and the model fields' names are imported
when asked for, so this module loads without Beam: ``sbert finetune``, which runs where Beam may
not be installed, uses it for its software versions.
"""

from __future__ import annotations

import time
from importlib.metadata import version

from sbert_core import __version__


def model_fields(manifest: dict) -> dict:
    """The model fields of an embeddings manifest (what later stages check inputs against)."""
    from sbert_pipeline.io.embeddings import MODEL_FIELDS  # loads pyarrow

    return {field: manifest[field] for field in MODEL_FIELDS if field in manifest}


def software_versions(*, beam: bool = True, **others: str) -> dict[str, str]:
    """``{"sbert_pipeline": ..., **others, "apache_beam": ...}`` (Beam left out when not used)."""
    versions = {"sbert_pipeline": __version__, **others}
    if beam:
        versions["apache_beam"] = version("apache-beam")
    return versions


def created_now() -> str:
    """The current time in UTC, as manifests write it (``2026-01-31T12:00:00Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
