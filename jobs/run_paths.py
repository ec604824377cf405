"""Where a job's folders lie against its inputs: apart, always.

Every folder the job writes (one per stage) and its own files (``job.yaml``, the state, the
report) are in ``job_dir``, so ``job_dir`` may not be, hold or lie in anything the job reads from
outside: the corpus (the files its glob can match), a model folder, ``embeddings:``, verify's
cross-encoder, the finetune config and data, dedup's reference folders and labels. Otherwise a
stage would read what the job itself wrote (a corpus glob matching the job's outputs) or replace
what a later stage reads (a model folder inside a stage folder). Checked before anything is
written, as each stage checks its own output against its own inputs
(:mod:`sbert_pipeline.io.path_relations`: links resolved, URLs by name).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from sbert_pipeline.io.path_relations import overlap_error
from sbert_pipeline.jobs.run_config import RunConfig, stage_options
from sbert_pipeline.jobs.run_table import FROM_FINETUNE


def job_inputs(config: RunConfig, finetune: dict | None) -> list[tuple[str, str]]:
    """``(config key, path or glob)`` of everything the job reads from outside ``job_dir``.

    Args:
        config: the job's config (checked).
        finetune: the finetune stage's described inputs (``CheckedInputs.finetune``), or None.
    """
    found: list[tuple[str, str]] = []
    if config.input.path.strip():
        found.append(("input.path", config.input.path))
    if config.enabled("embed") and config.model != FROM_FINETUNE:
        found += _paths("model", [config.model])
    if config.external_embeddings:
        found.append(("embeddings.path", config.embeddings.path))
    if config.enabled("verify"):
        found += _paths("verify.model", [stage_options(config, "verify").model])
    if finetune is not None:
        found.append(("finetune.config", stage_options(config, "finetune").config))
        found += [(f"finetune.config {e['role']}.path", e["path"]) for e in finetune["data"]]
    if config.enabled("dedup"):
        dedup = stage_options(config, "dedup")
        found += [("dedup.against", path) for path in dedup.against or ()]
        found += _paths("dedup.labels", [dedup.labels] if dedup.labels else [])
    return found


def _paths(key: str, names: Iterable[str]) -> list[tuple[str, str]]:
    """The names that are paths (a URL, or a local file or folder); a model's Hub name is not."""
    return [(key, name) for name in names if "://" in name or os.path.lexists(name)]


def refuse_job_dir_overlaps(job_dir: str, inputs: Sequence[tuple[str, str]]) -> None:
    """Refuse a ``job_dir`` equal to, inside or above any of ``inputs`` (see the module
    docstring).

    Raises:
        ValueError: naming ``job_dir``, the input's config key and both paths.
    """
    for key, path in inputs:
        why = overlap_error(job_dir, key, path)
        if why is not None:
            raise ValueError(f"job_dir: {why}")
