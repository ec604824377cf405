"""The stages of ``sbert run``: their options, fingerprints, outputs and the job state.

Every stage runs through its package's ``run(options)`` with the ``Options`` built from its
config section (``jobs/run_config.py``), so each stage's ``Options`` stays the one place its
options are defined and checked.

A stage is skipped when nothing it depends on changed. Its *fingerprint* is a sha256 over its
name, its options (Beam options and ``overwrite`` excepted: where a stage runs, and whether it
replaces an output, do not change what it writes),
its external inputs (corpus files by path, size and content digest, hashed on every run, since
an edit can keep a file's size and time; the model by id and weights sha256; the finetune config
and data files) and the *identity* of each upstream output:
the sha256 of that output's manifest, which a stage writes last and only on success. So an
upstream stage that ran again (a new manifest) makes its downstream stages run again, and a
stage never starts from an output without a manifest, i.e. a half-written one.

The job state (``JOB_DIR/_job_state.json``, replaced atomically) records per stage the
fingerprint it ran with, the identity of the output it wrote, its time and the process's peak
RSS at its start and end (see :class:`StageRecord`). A stage is skipped
when its recorded fingerprint equals the new one and its output's manifest is still the one it
wrote. A stage's entry is removed before it runs, so a run that dies leaves no entry claiming
an output that is being replaced (a stage that fails before touching its output gets its entry
back).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sbert_pipeline.io.atomic import write_json_replacing
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import MANIFEST, join
from sbert_pipeline.io.resources import release_free_memory
from sbert_pipeline.io.sizes import format_size
from sbert_pipeline.jobs.run_config import STATE_FILE, RunConfig, stage_options
from sbert_pipeline.jobs.run_inputs import CheckedInputs
from sbert_pipeline.jobs.run_table import VECTORS_STAGE, stage_spec
from sbert_pipeline.jobs.stage_cli import stage_package
from sbert_pipeline.stage_api.job_stage import JobStage
from sbert_pipeline.stage_api.options import BEAM_FIELD

STATE_FORMAT = 1


@dataclass(frozen=True)
class StagePlan:
    """One stage of this job: what it runs with and where it writes."""

    name: str
    output: str
    options: Any  # the stage's Options (the fingerprint covers them)
    beam_argv: tuple[str, ...]  # the job's Beam options, given when it runs pipelines
    inputs: dict  # external inputs, described for the fingerprint
    upstream: tuple[str, ...]

    def fingerprint(self, upstream_identities: dict[str, str | None]) -> str:
        """sha256 of what the stage's output depends on (see the module docstring)."""
        options = self.options.to_dict()
        options.pop("overwrite", None)
        payload = {
            "stage": self.name,
            "options": options,
            "inputs": self.inputs,
            "upstream": {name: upstream_identities[name] for name in self.upstream},
        }
        text = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def run_options(self, *, overwrite: bool) -> Any:
        """The options the stage runs with: ``overwrite`` and the Beam options set."""
        changes: dict[str, Any] = {"overwrite": overwrite}
        if self.beam_argv:
            changes[BEAM_FIELD] = self.beam_argv
        return self.options.replace(**changes)

    @property
    def spec(self) -> JobStage:
        """The stage's descriptor in the stage table."""
        return stage_spec(self.name)

    @property
    def manifest_name(self) -> str:
        """The file that marks the stage's output complete."""
        return self.spec.manifest or MANIFEST


@dataclass
class StageResult:
    """How one stage went in this run."""

    name: str
    status: str  # ran | skipped | not run | failed
    output: str
    seconds: float | None = None  # time of this run (ran, failed)
    recorded_seconds: float | None = None  # time of the run that wrote the output (skipped)
    line: str | None = None  # the stage's own one-line summary, when it ran
    facts: dict = field(default_factory=dict)  # key counts from its manifest
    error: str | None = None
    # The process's peak RSS at the stage's end and at its start (this run's, or for a skipped
    # stage the run's that wrote its output; see :class:`StageRecord`).
    peak_rss: int | None = None
    peak_rss_at_start: int | None = None

    def peak_rss_text(self) -> str:
        """The stage's peak RSS for the table: ``1.20 GiB`` when the stage raised the process's
        peak (its own peak is that), ``<= 1.20 GiB`` when an earlier stage of the same process
        had reached it (the stage's own peak is at most that), ``-`` when not measured."""
        if self.peak_rss is None:
            return "-"
        raised = self.peak_rss_at_start is None or self.peak_rss > self.peak_rss_at_start
        return ("" if raised else "<= ") + format_size(self.peak_rss)


def _manifest_bytes(plan: StagePlan) -> bytes | None:
    """The bytes of the stage output's manifest; None when the output is not complete."""
    path = join(plan.output, plan.manifest_name)
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
    """The listed stages in run order, each with its checked ``Options``.

    Args:
        config: the validated job config.
        checked: what :func:`sbert_pipeline.jobs.run_inputs.check_job_inputs` found.
        beam_argv: the job's Beam options (already checked against Beam's parser).

    Raises:
        ValueError: an option the stage does not have, or a value it refuses; the message names
            the config key.
        FileNotFoundError: a file a stage's options name does not exist.
    """
    context = config.context()
    plans = []
    for stage in config.ordered_stages():
        spec = stage_spec(stage)
        options = stage_options(config, stage)
        if spec.check_vectors is not None and checked.vector_dim is not None:
            spec.check_vectors(options, checked.vector_dim)
        beam = tuple(beam_argv) if spec.runs_pipelines(options) else ()
        _preflight(spec, options.replace(beam_options=beam) if beam else options)
        inputs = checked.external(stage)
        upstream = spec.upstream(context)
        if config.external_embeddings and VECTORS_STAGE in upstream:
            # The vectors come from outside the job: described like the corpus files, they
            # rerun the stage when they change, as a new embed output would.
            upstream = tuple(name for name in upstream if name != VECTORS_STAGE)
            inputs = {**inputs, "embeddings": checked.embeddings}
        plans.append(StagePlan(stage, context.folders[stage], options, beam, inputs, upstream))
    return plans


def _preflight(spec: JobStage, options: Any) -> None:
    """The stage's checks that need this machine or files, before any stage runs."""
    if spec.preflight is None:
        return
    try:
        spec.preflight(options)
    except (ValueError, FileNotFoundError) as err:
        kind = FileNotFoundError if isinstance(err, FileNotFoundError) else ValueError
        raise kind(f"{spec.name}: {err}; nothing was run or written") from None


def run_stage(plan: StagePlan, *, overwrite: bool) -> Any:
    """Run one stage through its package's ``run``; returns its ``Result``. What the stage
    freed goes back to the system after it, so the next stage's memory check counts only what
    is still held."""
    try:
        return stage_package(plan.name).run(plan.run_options(overwrite=overwrite))
    finally:
        release_free_memory()


@dataclass
class StageRecord:
    """What the job state remembers about a stage's last successful run.

    The stages of one ``sbert run`` share its process, whose peak RSS only grows: ``peak_rss``
    (bytes, :func:`sbert_pipeline.io.resources.peak_rss` at the stage's end) is the stage's own peak
    when it exceeds ``peak_rss_at_start``, and an upper bound of it otherwise. A state written
    before they were recorded reads as None.
    """

    fingerprint: str
    output_identity: str
    seconds: float
    finished: str
    peak_rss: int | None = None
    peak_rss_at_start: int | None = None


@dataclass
class JobState:
    """The job directory's record of finished stages (``_job_state.json``), and of the job that
    made it (``identity``: :func:`sbert_pipeline.jobs.run_inputs.job_identity`; None in a state
    written before it was recorded)."""

    job_dir: str
    stages: dict[str, StageRecord] = field(default_factory=dict)
    identity: dict | None = None

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
            identity = raw.get("job")
            if identity is not None and not isinstance(identity, dict):
                raise TypeError("job: not a mapping")
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"{path} is not a readable job state ({err}); delete it to rerun every stage"
            ) from None
        return cls(job_dir, stages, identity)

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

    def record(
        self,
        stage: str,
        fingerprint: str,
        identity: str,
        seconds: float,
        peak_rss: tuple[int, int] | None = None,
    ) -> None:
        """Remember a stage that finished, and save.

        Args:
            peak_rss: the process's peak RSS at the stage's start and at its end, in bytes.
        """
        finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        at_start, at_end = peak_rss if peak_rss is not None else (None, None)
        self.stages[stage] = StageRecord(
            fingerprint, identity, round(seconds, 3), finished, at_end, at_start
        )
        self.save()

    def save(self) -> None:
        """Write the state so that readers see the old file or the new one, never a mix."""
        value = {
            "format": STATE_FORMAT,
            "job": self.identity,
            "stages": {name: asdict(record) for name, record in self.stages.items()},
        }
        write_json_replacing(join(self.job_dir, STATE_FILE), value)


def stage_facts(plan: StagePlan) -> dict[str, Any]:
    """The key counts of a stage's complete output (empty when it has none).

    Read from the output itself (manifest, Parquet footers), so a skipped stage reports the
    same numbers as the run that wrote it.
    """
    manifest = read_stage_manifest(plan)
    return {} if manifest is None else plan.spec.facts(manifest)
