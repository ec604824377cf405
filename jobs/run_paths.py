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

from collections.abc import Mapping, Sequence
from typing import Any

from sbert_pipeline.io.path_relations import overlap_error
from sbert_pipeline.jobs.run_config import RunConfig
from sbert_pipeline.jobs.run_table import stage_spec


def job_inputs(config: RunConfig, options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(config key, path or glob)`` of everything the job reads from outside ``job_dir``:
    the corpus, ``embeddings:``, and what each listed stage's options name (its
    ``external_paths``).

    Args:
        config: the job's config (checked).
        options: each listed stage -> its ``Options``, in run order.

    Raises:
        FileNotFoundError, ValueError: a stage's config cannot name its paths (a finetune
            config that does not resolve), naming the config key.
    """
    found: list[tuple[str, str]] = []
    if config.input.path.strip():
        found.append(("input.path", config.input.path))
    if config.external_embeddings:
        found.append(("embeddings.path", config.embeddings.path))
    context = config.context()
    for name, stage_options in options.items():
        found += stage_spec(name).external_paths(stage_options, context)
    return found


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
