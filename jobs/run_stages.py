"""The stages of ``sbert run``: their command lines, fingerprints, outputs and the job state.

Every stage is run through its own command's ``run(argv)`` with an argument list built from
the config, so each stage's code stays the one place its options are defined and checked.

A stage is skipped when nothing it depends on changed. Its *fingerprint* is a sha256 over its
name, its arguments (Beam options excepted: where a stage runs does not change what it writes),
its external inputs (corpus files by path, size and modification time; the model by id and
weights sha256; the finetune config and data files) and the *identity* of each upstream output:
the sha256 of that output's manifest, which a stage writes last and only on success. So an
upstream stage that ran again (a new manifest) makes its downstream stages run again, and a
stage never starts from an output without a manifest, i.e. a half-written one.

The job state (``JOB_DIR/_job_state.json``, replaced atomically) records per stage the
fingerprint it ran with, the identity of the output it wrote, and its time. A stage is skipped
when its recorded fingerprint equals the new one and its output's manifest is still the one it
wrote. A stage's entry is removed before it runs, so a run that dies leaves no entry claiming
an output that is being replaced (a stage that fails before touching its output gets its entry
back).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from apache_beam.io.filesystems import FileSystems

from jobs.run_config import (
    FROM_FINETUNE,
    STAGE_DIRS,
    STAGE_INPUTS,
    STATE_FILE,
    CheckedInputs,
    RunConfig,
    finetune_argv,
    stage_module,
)
from pipelines.output_dir import MANIFEST, join, write_json

STATE_FORMAT = 1
# The file whose bytes identify a finished output: written last, only on success.
FINETUNE_MANIFEST = "sbert_manifest.json"
# Options the job sets itself; a stage's ``options:`` may not set them.
_JOB_OWNED = {
    "--input",
    "--output",
    "--model",
    "--embeddings",
    "--pairs",
    "--corpus",
    "--apply",
    "--overwrite",
    "--config",
    "--print-config",
    "--dry-run",
}
# Input-section fields and the ``sbert embed`` options they become.
_INPUT_FIELDS = ("format", "text_field", "id_field", "keep_fields", "keep_text", "max_record_bytes")


@dataclass(frozen=True)
class StagePlan:
    """One stage of this job: what it runs with and where it writes."""

    name: str
    output: str
    argv: tuple[str, ...]  # the stage's own options (the fingerprint covers these)
    beam_argv: tuple[str, ...]  # Beam options appended when it runs
    inputs: dict  # external inputs, described for the fingerprint
    upstream: tuple[str, ...]

    def fingerprint(self, upstream_identities: dict[str, str | None]) -> str:
        """sha256 of what the stage's output depends on (see the module docstring)."""
        payload = {
            "stage": self.name,
            "argv": list(self.argv),
            "inputs": self.inputs,
            "upstream": {name: upstream_identities[name] for name in self.upstream},
        }
        text = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def command(self, *, overwrite: bool) -> list[str]:
        """The full argument list for the stage's ``run``."""
        extra = ["--overwrite"] if overwrite else []
        return [*self.argv, *extra, *self.beam_argv]


def _manifest_bytes(plan: StagePlan) -> bytes | None:
    """The bytes of the stage output's manifest; None when the output is not complete."""
    name = FINETUNE_MANIFEST if plan.name == "finetune" else MANIFEST
    path = join(plan.output, name)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as handle:
        return handle.read()


def output_identity(plan: StagePlan) -> str | None:
    """sha256 of the stage output's manifest; None when there is no complete output."""
    data = _manifest_bytes(plan)
    if data is None or read_stage_manifest(plan) is None:
        return None
    return hashlib.sha256(data).hexdigest()


def read_stage_manifest(plan: StagePlan) -> dict | None:
    """The stage output's manifest, or None when the output is not complete (or its manifest
    is empty or unparsable, as after a failed write: the stage then runs again)."""
    data = _manifest_bytes(plan)
    if data is None:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def plan_stages(config: RunConfig, checked: CheckedInputs, beam_argv: list[str]) -> list[StagePlan]:
    """The listed stages in run order, each with its checked command line.

    Args:
        config: the validated job config.
        checked: what :func:`jobs.run_config.check_inputs` found.
        beam_argv: the job's Beam options (already checked against Beam's parser).

    Raises:
        ValueError: an option the stage's command does not have, or a value it refuses; the
            message names the config key.
    """
    job_dir = config.job_dir
    out = {stage: join(job_dir, folder) for stage, folder in STAGE_DIRS.items()}
    plans = []
    for stage in config.ordered_stages():
        parser = stage_module(stage).build_parser()
        actions = _option_actions(parser)
        beam: list[str] = []
        inputs: dict = {}
        upstream = STAGE_INPUTS[stage]
        if stage == "finetune":
            argv = finetune_argv(config)
            inputs = checked.finetune or {}
        elif stage == "embed":
            model = out["finetune"] if config.model == FROM_FINETUNE else config.model
            argv = ["--input", config.input.path, "--output", out["embed"], "--model", model]
            input_values = {name: getattr(config.input, name) for name in _INPUT_FIELDS}
            argv += _flags(input_values, actions, "input")
            argv += _section_flags(config.embed, actions, "embed")
            inputs = {"corpus": [asdict(f) for f in checked.corpus], "model": checked.model}
            if config.model == FROM_FINETUNE:
                upstream = ("finetune",)
            beam = list(beam_argv)
        elif stage == "index":
            argv = ["--embeddings", out["embed"], "--output", out["index"]]
            argv += _section_flags(config.index, actions, "index")
            _check_factory(config, checked)
            # The index is built in this process unless it is sharded over Beam workers.
            beam = list(beam_argv) if config.index.shards is not None else []
        elif stage == "cluster":
            argv = ["--embeddings", out["embed"], "--output", out["cluster"]]
            argv += _section_flags(config.cluster, actions, "cluster")
            if not config.input.keep_text:
                argv += ["--text-from", config.input.path]
            beam = list(beam_argv)
        elif stage == "pairs":
            argv = ["--embeddings", out["embed"], "--output", out["pairs"]]
            argv += _section_flags(config.pairs, actions, "pairs")
            beam = list(beam_argv)
        else:
            # The corpus gives dedup the corpus order (keep: first), texts for the report and,
            # with apply, the rows to write. Dedup runs in this process: no Beam options.
            argv = ["--pairs", out["pairs"], "--output", out["dedup"]]
            argv += ["--corpus", config.input.path]
            argv += _section_flags(config.dedup, actions, "dedup")
        _check_values(stage, parser, argv)
        plans.append(StagePlan(stage, out[stage], tuple(argv), tuple(beam), inputs, upstream))
    return plans


def _check_factory(config: RunConfig, checked: CheckedInputs) -> None:
    """A FAISS factory string is checked now, for the model's dimension, not after embedding."""
    from pipelines.index_build import new_index

    model = checked.model or (checked.finetune or {}).get("base_model") or {}
    if config.index.factory == "auto" or "dim" not in model:
        return
    try:
        new_index(config.index.factory, int(model["dim"]), config.index.metric)
    except ValueError as err:
        raise ValueError(f"index.factory: {err}") from None


def _section_values(section: Any) -> dict[str, Any]:
    values = asdict(section)
    values.pop("options", None)
    return values


def _section_flags(section: Any, actions: dict[str, argparse.Action], where: str) -> list[str]:
    """A stage section's typed fields, then its ``options:``, as command-line flags."""
    argv = _flags(_section_values(section), actions, where)
    typed = {f"--{name.replace('_', '-')}" for name in _section_values(section)}
    for key in section.options:
        if f"--{key.replace('_', '-')}" in typed:
            raise ValueError(f"{where}.options.{key}: set it as {where}.{key.replace('-', '_')}")
    return argv + _flags(section.options, actions, f"{where}.options", extra=True)


def _flags(
    values: dict[str, Any],
    actions: dict[str, argparse.Action],
    where: str,
    *,
    extra: bool = False,
) -> list[str]:
    """``{name: value}`` as flags: None leaves an option out, booleans switch it, lists join."""
    argv: list[str] = []
    for key, value in values.items():
        flag = f"--{str(key).replace('_', '-')}"
        action = actions.get(flag)
        if action is None or (extra and flag in _JOB_OWNED):
            reason = "is set by sbert run" if action is not None else "is not an option of"
            raise ValueError(f"{where}.{key}: {flag} {reason} this stage's command")
        if value is None:
            continue
        is_switch = action.nargs == 0
        if isinstance(value, bool):
            if not is_switch:
                raise ValueError(f"{where}.{key}: takes a value, not {str(value).lower()}")
            negative = f"--no-{flag[2:]}"
            argv += [flag] if value else ([negative] if negative in actions else [])
        elif is_switch:
            raise ValueError(f"{where}.{key}: an on/off option; write true or false")
        elif isinstance(value, dict):
            raise ValueError(f"{where}.{key}: expected a single value or a list, got a mapping")
        elif isinstance(value, list):
            if value:
                argv.append(f"{flag}={','.join(str(item) for item in value)}")
        else:
            argv.append(f"{flag}={value}")
    return argv


def _option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    from jobs.submit import option_actions

    return option_actions(parser)


def _check_values(stage: str, parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Let the stage's parser check types and choices now, before any stage runs."""
    parser.exit_on_error = False
    try:
        parser.parse_known_args(argv)
    except argparse.ArgumentError as err:
        raise ValueError(f"{stage}: {err}") from None


def run_stage(plan: StagePlan, *, overwrite: bool) -> Any:
    """Run one stage through its command's ``run``; returns that command's summary."""
    return stage_module(plan.name).run(plan.command(overwrite=overwrite))


@dataclass
class StageRecord:
    """What the job state remembers about a stage's last successful run."""

    fingerprint: str
    output_identity: str
    seconds: float
    finished: str


@dataclass
class JobState:
    """The job directory's record of finished stages (``_job_state.json``)."""

    job_dir: str
    stages: dict[str, StageRecord] = field(default_factory=dict)

    @classmethod
    def load(cls, job_dir: str) -> JobState:
        """The saved state, or an empty one for a new job directory.

        Raises:
            ValueError: the state file is unreadable (it names the file to delete).
        """
        path = join(job_dir, STATE_FILE)
        if not FileSystems.exists(path):
            return cls(job_dir)
        try:
            with FileSystems.open(path) as handle:
                raw = json.loads(handle.read().decode("utf-8"))
            stages = {name: StageRecord(**record) for name, record in raw["stages"].items()}
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"{path} is not a readable job state ({err}); delete it to rerun every stage"
            ) from None
        return cls(job_dir, stages)

    def is_current(self, stage: str, fingerprint: str, identity: str | None) -> bool:
        """True when ``stage`` last ran with ``fingerprint`` and its output is still that run's."""
        record = self.stages.get(stage)
        return (
            record is not None
            and identity is not None
            and record.fingerprint == fingerprint
            and record.output_identity == identity
        )

    def forget(self, stage: str) -> None:
        """Drop a stage's record and save (before its output is replaced)."""
        if self.stages.pop(stage, None) is not None:
            self.save()

    def record(self, stage: str, fingerprint: str, identity: str, seconds: float) -> None:
        """Remember a stage that finished, and save."""
        finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.stages[stage] = StageRecord(fingerprint, identity, round(seconds, 3), finished)
        self.save()

    def save(self) -> None:
        """Write the state so that readers see the old file or the new one, never a mix."""
        value = {
            "format": STATE_FORMAT,
            "stages": {name: asdict(record) for name, record in self.stages.items()},
        }
        write_atomically(join(self.job_dir, STATE_FILE), value)


def write_atomically(path: str, value: dict) -> None:
    """Write JSON that appears whole: a temporary file renamed over the target on local disks;
    one object write (complete or absent) on object stores."""
    if "://" in path:
        write_json(path, value)
        return
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".state.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(value, stream, indent=2, default=str)
            stream.write("\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the other outputs are not
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def stage_facts(plan: StagePlan) -> dict[str, Any]:
    """The key counts of a stage's complete output (empty when it has none).

    Read from the output itself (manifest, Parquet footers), so a skipped stage reports the
    same numbers as the run that wrote it.
    """
    manifest = read_stage_manifest(plan)
    if manifest is None:
        return {}
    if plan.name == "finetune":
        return {"steps": manifest.get("training", {}).get("steps")}
    if plan.name == "embed":
        counts = manifest.get("counts", {})
        return {key: counts.get(key) for key in ("read", "embedded", "rejected")}
    if plan.name == "index":
        return {
            "vectors": manifest.get("ntotal"),
            "factory": manifest.get("factory"),
            "recall@10": manifest.get("recall_at_10"),
        }
    if plan.name == "cluster":
        return {"clusters": manifest.get("k"), "items": manifest.get("counts", {}).get("items")}
    if plan.name == "pairs":
        return {"pairs": manifest.get("counts", {}).get("pairs"), "method": manifest.get("method")}
    counts = manifest.get("counts", {})
    return {key: counts.get(key) for key in ("groups", "removed", "kept")}
