"""What ``sbert run`` checks before the job directory is touched: the corpus files, the model,
the finetune config and the ``embeddings:`` vectors exist, and the job directory is a job's;
what it found describes the stage inputs in the fingerprints (see ``jobs/run_stages.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sbert_pipeline.io.content_checks import file_digests
from sbert_pipeline.io.output_names import refuse_output_folder
from sbert_pipeline.jobs.run_config import REMOTE_SCHEMES, STATE_FILE, RunConfig, stage_options
from sbert_pipeline.jobs.run_paths import job_inputs, refuse_job_dir_overlaps
from sbert_pipeline.jobs.run_table import FROM_FINETUNE
from sbert_pipeline.stage_api.model_options import ModelOptions, encoder_settings

from sbert_core.config import config_to_dict
from sbert_core.errors import ModelLoadError


@dataclass(frozen=True)
class CorpusFile:
    """One input file as the fingerprints record it: by its content (xxh3_128 of its bytes as
    stored), never by its modification time, which an edit can keep."""

    path: str
    size: int
    digest: str


@dataclass(frozen=True)
class CheckedInputs:
    """What :func:`check_inputs` found: the stage inputs, described for fingerprints."""

    corpus: tuple[CorpusFile, ...]
    model: dict | None  # model_id, weights_sha256, ...; None for model: finetune
    finetune: dict | None  # config digest and data files of the finetune stage
    # The verify stage's cross-encoder folder, file by file; None without a verify stage.
    verifier: dict | None = None
    # The job's ``embeddings:`` (its manifest's sha256, or a dataset's files); None without.
    embeddings: dict | None = None

    def external(self, stage: str) -> dict:
        """The inputs of ``stage`` from outside the job, described for its fingerprint."""
        if stage == "embed":
            return {"corpus": [asdict(f) for f in self.corpus], "model": self.model}
        if stage == "finetune":
            return self.finetune or {}
        if stage == "verify":
            return {"model": self.verifier}
        return {}


def check_inputs(config: RunConfig) -> CheckedInputs:
    """Check that the corpus, the model and the finetune config exist; describe them.

    Raises:
        FileNotFoundError: no input file matches input.path, or a finetune file is missing.
        ModelLoadError: the model cannot be found or read (message starts with ``model:``).
        ValueError: the finetune config is invalid; the job directory is not a job's, or is
            equal to, inside or above an input (``jobs/run_paths.py``).
    """
    refuse_output_folder(config.job_dir, "job_dir")  # the root, $HOME: before any listing
    finetune = _finetune_inputs(config) if config.enabled("finetune") else None
    refuse_job_dir_overlaps(config.job_dir, job_inputs(config, finetune))
    _check_job_dir(config.job_dir)
    corpus: tuple[CorpusFile, ...] = ()
    if config.enabled("embed"):
        corpus = _corpus_files(config.input.path)
    model = None
    if config.enabled("embed") and config.model != FROM_FINETUNE:
        model = model_identity(stage_options(config, "embed"))
    verifier = None
    if config.enabled("verify"):
        verifier = _model_files(stage_options(config, "verify").model)
    embeddings = _embeddings_identity(config) if config.external_embeddings else None
    return CheckedInputs(
        corpus=corpus, model=model, finetune=finetune, verifier=verifier, embeddings=embeddings
    )


def job_identity(config: RunConfig) -> dict:
    """What makes a job directory this job's, keyed by config key: where its rows come from and
    what they mean (the corpus and how its records and ids are read, the model, the vectors of
    ``embeddings:``); local paths as the OS resolves them. A job directory made with another
    identity holds outputs this job's would be mixed with. Stage parameters and the stages list
    are not in it: a change of those reruns the stages concerned."""
    identity: dict[str, str | None] = {
        "input.path": _resolved(config.input.path),
        "input.format": config.input.format,
        "input.text_field": config.input.text_field,
        "input.id_field": config.input.id_field,
        "model": _resolved(config.model) if os.path.lexists(config.model) else config.model,
        # None: the vectors are the embed stage's own.
        "embeddings.path": None,
        "embeddings.id_column": None,
        "embeddings.embedding_column": None,
    }
    if config.external_embeddings:
        identity["embeddings.path"] = _resolved(config.embeddings.path)
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


def _resolved(path: str) -> str:
    """A local path as the OS resolves it; a URL (or nothing) as written."""
    return path if "://" in path or not path else os.path.realpath(path)


def check_between(stage: str, options: Any, checked: CheckedInputs) -> None:
    """Checks of a stage's options against the job's inputs, before any stage runs: an index
    factory string is checked now, for the model's dimension, not after embedding.

    Raises:
        ValueError: naming the config key.
    """
    if stage != "index" or options.factory == "auto":
        return
    from sbert_pipeline.index.faiss_ops import new_index

    model = (
        checked.model
        or (checked.finetune or {}).get("base_model")
        or (checked.embeddings or {}).get("manifest")
        or {}
    )
    if "dim" not in model:
        return
    try:
        new_index(options.factory, int(model["dim"]), options.metric)
    except ValueError as err:
        raise ValueError(f"index.factory: {err}") from None


def model_identity(options: Any) -> dict:
    """The identity (id, weights sha256, dim, pooling) of the model of ``options`` (the embed
    stage's, or any with the model options), as the embed manifest records it."""
    # task: a corpus is embedded as documents, as sbert embed does.
    settings = encoder_settings(options, task="document")
    try:
        info = settings.inspect()
    except ModelLoadError as err:
        raise ModelLoadError(f"model: {err}") from None
    except ValueError as err:
        raise ValueError(f"model: {err}") from None
    return settings.describe(info)


def _corpus_files(pattern: str) -> tuple[CorpusFile, ...]:
    """The files ``pattern`` matches, as the embed stage matches them (a local file or folder
    named with glob characters as written; a file name that is not UTF-8 refused)."""
    from sbert_pipeline.io.corpus_files import refuse_unrecordable_names
    from sbert_pipeline.io.filesystems import FileSystems

    matched = FileSystems.match([pattern])[0].metadata_list
    if not matched:
        raise FileNotFoundError(f"input.path: no files match {pattern}")
    refuse_unrecordable_names(m.path for m in matched)
    return _described((m.path, int(m.size_in_bytes)) for m in matched)


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
        # The dim lets index.factory be checked before any stage runs.
        manifest = {"model_id": dataset.manifest.get("model_id"), "dim": dataset.dim}
        return {
            "manifest_sha256": digest,
            "manifest": manifest,
            "files": _file_stats(list(dataset.shards)),
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
    return {"files": _file_stats(files), "columns": source.columns()}


def _file_stats(paths: list[str]) -> list[dict]:
    """Each file's path, size and digest, sorted by path."""
    from sbert_pipeline.io.filesystems import FileSystems

    found = [m for result in FileSystems.match(paths) for m in result.metadata_list]
    return [asdict(f) for f in _described((m.path, int(m.size_in_bytes)) for m in found)]


def _described(files: Iterable[tuple[str, int]]) -> tuple[CorpusFile, ...]:
    """``(path, size)`` files as the fingerprints record them, sorted by path.

    Every file is hashed on every run: a size and time that did not change prove nothing (an
    edit can keep both), and XXH3 hashes faster than the disk reads.
    """
    found = sorted(files)
    digests = file_digests(found)
    return tuple(
        CorpusFile(path, size, digest) for (path, size), digest in zip(found, digests, strict=True)
    )


def _local_files(paths: Iterable[Path]) -> list[dict]:
    """Local files as the fingerprints record them (path, size, digest), sorted by path."""
    return [asdict(f) for f in _described((str(p), p.stat().st_size) for p in paths)]


def _model_files(model: str) -> dict:
    """A model folder described by its files (path, size, digest), so that a model retrained
    into the same folder changes the fingerprint; a name that is no local folder (a Hub id) by
    the name alone.

    Raises:
        FileNotFoundError: ``model`` is a path (absolute, or starting with ``.`` or ``~``) to
            no folder.
    """
    folder = Path(model)
    if not folder.is_dir():
        if folder.is_absolute() or model.startswith((".", "~")):  # a path, not a Hub id
            raise FileNotFoundError(f"verify.model: {model} is not a folder")
        return {"name": model}
    files = _local_files([path for path in folder.rglob("*") if path.is_file()])
    for entry in files:
        entry["path"] = str(Path(entry["path"]).relative_to(folder))
    return {"name": model, "files": files}


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


def _finetune_inputs(config: RunConfig) -> dict:
    """Resolve the finetune config as ``sbert finetune`` would; describe its files."""
    from sbert_pipeline.finetune.config import resolve_config

    options = stage_options(config, "finetune")
    path = Path(options.config)
    if not path.is_file():
        raise FileNotFoundError(f"finetune.config: {path} does not exist")
    try:
        resolved = resolve_config(options)
    except ValueError as err:
        raise ValueError(f"finetune.config: {err}") from None
    if resolved.kind == "cross_encoder" and config.model == FROM_FINETUNE:
        # Checked now, not when embed fails to load a pair scorer after the training.
        raise ValueError(
            f"model: 'finetune' embeds with the finetune stage's model, but {path} trains a "
            "cross-encoder (kind: cross_encoder), which scores pairs and makes no vectors; "
            "name a bi-encoder in model: and the trained cross-encoder's folder in "
            "verify.model (train it first with sbert finetune --config ...)"
        )
    specs = [("train", resolved.train), ("dev", resolved.dev)]
    specs += [(f"test.{i}", spec) for i, spec in enumerate(resolved.test)]
    files = []
    for role, spec in specs:
        if spec is None:
            continue
        data = Path(spec.path)
        if not data.is_file():
            raise FileNotFoundError(f"finetune.config: {role}.path {data} does not exist")
        files += [{"role": role, **entry} for entry in _local_files([data])]
    try:
        base = model_identity(
            ModelOptions(model=resolved.model, allow_pickle=resolved.allow_pickle)
        )
    except (ModelLoadError, ValueError) as err:
        raise type(err)(f"finetune.config: base {err}") from None
    return {
        "config": _finetune_settings(resolved),
        "data": files,
        "base_model": base,
    }


def _finetune_settings(resolved: Any) -> dict:
    """A resolved finetune config without where it writes (which the job decides)."""
    values = config_to_dict(resolved)
    for key in ("output", "overwrite"):
        values.pop(key, None)
    values.get("training", {}).pop("checkpoint_dir", None)
    return values
