"""What ``sbert run`` checks before the job directory is touched: the job directory is a job's
and lies apart from everything the job reads from outside it, and what each stage reads from
outside the job (its ``external_inputs``: the corpus, a model, a config) and the ``embeddings:``
vectors exist; what it found describes the stage inputs in the fingerprints (see
``jobs/run_stages.py``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sbert_pipeline.io.output_names import refuse_output_folder
from sbert_pipeline.jobs.run_config import REMOTE_SCHEMES, STATE_FILE, RunConfig, stage_options
from sbert_pipeline.jobs.run_paths import job_inputs, refuse_job_dir_overlaps
from sbert_pipeline.jobs.run_table import stage_spec
from sbert_pipeline.stage_api.input_files import matched_files


@dataclass(frozen=True)
class CheckedInputs:
    """What :func:`check_job_inputs` found, described for the fingerprints.

    Attributes:
        stages: each listed stage -> what it reads from outside the job (its
            ``external_inputs``).
        embeddings: the job's ``embeddings:`` (its manifest's sha256, or a dataset's files);
            None without.
        vector_dim: the dimension of the vectors the stages read, when known before any stage
            runs (None: not known).
    """

    stages: Mapping[str, dict] = field(default_factory=dict)
    embeddings: dict | None = None
    vector_dim: int | None = None

    def external(self, stage: str) -> dict:
        """The inputs of ``stage`` from outside the job, described for its fingerprint."""
        return dict(self.stages.get(stage, {}))


def check_job_inputs(config: RunConfig) -> CheckedInputs:
    """Check that what the job reads from outside exists and lies apart from the job directory,
    and that the job directory is a job's; describe what the stages read.

    Raises:
        FileNotFoundError: no input file matches input.path, a file a stage reads is missing.
        ModelLoadError: the model cannot be found or read (message starts with ``model:``).
        ValueError: the finetune config is invalid; the job directory is not a job's, or is
            equal to, inside or above an input (``jobs/run_paths.py``).
    """
    refuse_output_folder(config.job_dir, "job_dir")  # the root, $HOME: before any listing
    context = config.context()
    listed = {name: stage_options(config, name) for name in config.ordered_stages()}
    refuse_job_dir_overlaps(config.job_dir, job_inputs(config, listed))
    _check_job_dir(config.job_dir)
    described = {
        name: stage_spec(name).external_inputs(options, context) for name, options in listed.items()
    }
    embeddings = _embeddings_identity(config) if config.external_embeddings else None
    return CheckedInputs(described, embeddings, _vector_dim(described, embeddings))


def _vector_dim(described: Mapping[str, dict], embeddings: dict | None) -> int | None:
    """The dimension of the vectors the job's stages read, when known before any stage runs:
    that of the latest stage that knows it (embed's own model before the model finetune starts
    from), else that of ``embeddings:``."""
    for name in reversed(list(described)):
        spec = stage_spec(name)
        dim = spec.vector_dim(described[name]) if spec.vector_dim is not None else None
        if dim is not None:
            return int(dim)
    dim = ((embeddings or {}).get("manifest") or {}).get("dim")
    return None if dim is None else int(dim)


def job_identity(config: RunConfig) -> dict:
    """What makes a job directory this job's, keyed by config key: where its rows come from and
    what they mean (the corpus and how its records and ids are read, the model, the vectors of
    ``embeddings:``); local paths as the OS resolves them. A job directory made with another
    identity holds outputs this job's would be mixed with. Stage parameters and the stages list
    are not in it: a change of those reruns the stages concerned."""
    identity: dict[str, str | None] = {
        "input.path": _resolved_path(config.input.path),
        "input.format": config.input.format,
        "input.text_field": config.input.text_field,
        "input.id_field": config.input.id_field,
        "model": _resolved_path(config.model) if os.path.lexists(config.model) else config.model,
        # None: the vectors are the embed stage's own.
        "embeddings.path": None,
        "embeddings.id_column": None,
        "embeddings.embedding_column": None,
    }
    if config.external_embeddings:
        identity["embeddings.path"] = _resolved_path(config.embeddings.path)
        identity["embeddings.id_column"] = config.embeddings.id_column
        identity["embeddings.embedding_column"] = config.embeddings.embedding_column
    return identity


def check_same_job(recorded: dict | None, config: RunConfig) -> None:
    """Refuse a job directory another job made (``recorded``: the identity in its state; None
    for a new directory or a state written before identities were recorded).

    Raises:
        ValueError: naming the job directory and the first key that differs, both values.
    """
    if recorded is None:
        return
    current = job_identity(config)
    for key, value in current.items():
        if key in recorded and recorded[key] != value:
            raise ValueError(
                f"job_dir: {config.job_dir} holds the outputs of another job ({key} was "
                f"{recorded[key]!r} there, is {value!r} here), which this job's would be mixed "
                f"with; choose another job_dir, or delete {config.job_dir} to start over"
            )


def _resolved_path(path: str) -> str:
    """A local path as the OS resolves it; a URL (or nothing) as written."""
    return path if "://" in path or not path else os.path.realpath(path)


def _embeddings_identity(config: RunConfig) -> dict:
    """The job's ``embeddings:`` described for the fingerprints of the stages that read them:
    an embed output by its manifest's sha256 (a new run of embed changes it) and the files it
    lists, a Parquet dataset by its files and the columns read; a file is its path, size and
    digest, as the corpus files are.

    Raises:
        FileNotFoundError: no such folder, no manifest and no columns named, or no Parquet
            files (each naming ``embeddings.path``).
        ValueError: the folder's manifest is unreadable or disagrees with its files.
    """
    import hashlib

    from sbert_pipeline.io.embeddings import EmbeddingsDataset
    from sbert_pipeline.io.external_vectors import external_files, is_embed_output
    from sbert_pipeline.io.filesystems import FileSystems
    from sbert_pipeline.io.output_dir import MANIFEST, join

    source = config.embeddings
    if is_embed_output(source.path):
        try:
            dataset = EmbeddingsDataset.open(source.path)
        except ValueError as err:
            raise ValueError(f"embeddings.path: {err}") from None
        with FileSystems.open(join(source.path, MANIFEST)) as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        # The dim lets the stages' options be checked against it before any stage runs.
        manifest = {"model_id": dataset.manifest.get("model_id"), "dim": dataset.dim}
        return {
            "manifest_sha256": digest,
            "manifest": manifest,
            "files": matched_files(list(dataset.shards)),
        }
    if source.embedding_column is None:
        raise FileNotFoundError(
            f"embeddings.path: {source.path} has no {MANIFEST}, so it is no finished sbert embed "
            "output; for a Parquet dataset name its columns in embeddings.embedding_column and "
            "embeddings.id_column"
        )
    try:
        files = external_files(source.path)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"embeddings.path: {err}") from None
    return {"files": matched_files(files), "columns": source.columns()}


def _check_job_dir(job_dir: str) -> None:
    """Refuse a job directory that holds something other than a job of ours (called after
    :func:`~sbert_pipeline.io.output_names.refuse_output_folder`, which refuses the root, the home
    folder and names no stage can write under before anything lists them): it is looked into
    only until its first file, and not at all when it holds our state file."""
    from sbert_pipeline.io.filesystems import FileSystems
    from sbert_pipeline.io.output_dir import join

    if not job_dir.startswith(REMOTE_SCHEMES) and Path(job_dir).is_file():
        raise ValueError(f"job_dir: {job_dir} is a file, not a directory")
    if not FileSystems.exists(join(job_dir, STATE_FILE)) and _holds_a_file(job_dir):
        raise ValueError(
            f"job_dir: {job_dir} exists and holds files of something other than an sbert run "
            "job (no state file); choose a new or empty directory"
        )


def _holds_a_file(directory: str) -> bool:
    """Whether any file lies below ``directory``; the listing stops at the first one."""
    from sbert_pipeline.io.filesystems import FileSystems
    from sbert_pipeline.io.output_dir import join

    if "://" in directory:
        if not FileSystems.exists(directory):
            return False
        return bool(FileSystems.match([join(directory, "**")], [1])[0].metadata_list)
    return any(names for _, _, names in os.walk(directory))
