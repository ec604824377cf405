"""The finetune stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``).

Its output is ``JOB_DIR/model``; ``model: finetune`` makes the embed stage use it. From outside
the job it reads its config, the data files the config names and the base model: the config is
resolved as ``sbert finetune`` resolves it, before any stage runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sbert_pipeline.stage_api.input_files import local_files, model_identity
from sbert_pipeline.stage_api.job_stage import JobContext, JobStage

# The config key of the finetune config, as messages name it.
CONFIG_KEY = "finetune.config"


def _wire(context: JobContext) -> dict[str, Any]:
    return {"output": context.folders["finetune"], "print_config": False}


def _resolved(options: Any, context: JobContext) -> Any:
    """The finetune config, resolved as ``sbert finetune`` would.

    Raises:
        FileNotFoundError: no config file.
        ValueError: an invalid config, or a cross-encoder where the job embeds with the model.
    """
    from sbert_pipeline.finetune.config import resolve_config

    path = Path(options.config)
    if not path.is_file():
        raise FileNotFoundError(f"{CONFIG_KEY}: {path} does not exist")
    try:
        resolved = resolve_config(options)
    except ValueError as err:
        raise ValueError(f"{CONFIG_KEY}: {err}") from None
    if resolved.kind == "cross_encoder" and context.from_finetune:
        # Checked now, not when embed fails to load a pair scorer after the training.
        raise ValueError(
            f"model: 'finetune' embeds with the finetune stage's model, but {path} trains a "
            "cross-encoder (kind: cross_encoder), which scores pairs and makes no vectors; "
            "name a bi-encoder in model: and the trained cross-encoder's folder in "
            "verify.model (train it first with sbert finetune --config ...)"
        )
    return resolved


def _data_files(resolved: Any) -> list[tuple[str, Path]]:
    """``(role, path)`` of the data files the config names (train, dev, test.N).

    Raises:
        FileNotFoundError: a data file does not exist.
    """
    specs = [("train", resolved.train), ("dev", resolved.dev)]
    specs += [(f"test.{i}", spec) for i, spec in enumerate(resolved.test)]
    files = []
    for role, spec in specs:
        if spec is None:
            continue
        data = Path(spec.path)
        if not data.is_file():
            raise FileNotFoundError(f"{CONFIG_KEY}: {role}.path {data} does not exist")
        files.append((role, data))
    return files


def _external_paths(options: Any, context: JobContext) -> list[tuple[str, str]]:
    files = _data_files(_resolved(options, context))
    return [
        (CONFIG_KEY, options.config),
        *((f"{CONFIG_KEY} {role}.path", str(data)) for role, data in files),
    ]


def _external_inputs(options: Any, context: JobContext) -> dict:
    # The config as resolved (less where it writes), the data files by content, the base model
    # by its identity.
    from sbert_pipeline.stage_api.model_options import ModelOptions

    from sbert_core.errors import ModelLoadError

    resolved = _resolved(options, context)
    files = [
        {"role": role, **entry}
        for role, data in _data_files(resolved)
        for entry in local_files([data])
    ]
    try:
        base = model_identity(
            ModelOptions(model=resolved.model, allow_pickle=resolved.allow_pickle)
        )
    except (ModelLoadError, ValueError) as err:
        raise type(err)(f"{CONFIG_KEY}: base {err}") from None
    return {"config": _settings(resolved), "data": files, "base_model": base}


def _settings(resolved: Any) -> dict:
    """A resolved finetune config without where it writes (which the job decides)."""
    from sbert_core.config import config_to_dict

    values = config_to_dict(resolved)
    for key in ("output", "overwrite"):
        values.pop(key, None)
    values.get("training", {}).pop("checkpoint_dir", None)
    return values


def _vector_dim(described: dict) -> int | None:
    # Known before it trains: that of the model it starts from.
    return (described.get("base_model") or {}).get("dim")


def _facts(manifest: dict) -> dict:
    return {"steps": manifest.get("training", {}).get("steps")}


JOB_STAGE = JobStage(
    name="finetune",
    folder="model",
    inputs=(),
    wire=_wire,
    required={"config": "a finetune YAML"},
    runs_pipelines=lambda options: False,  # training runs in this process
    external_paths=_external_paths,
    external_inputs=_external_inputs,
    vector_dim=_vector_dim,
    manifest="sbert_manifest.json",
    facts=_facts,
)
