"""The stages of ``sbert run``: their options, fingerprints and outputs.

Every stage runs through its package's ``run(options)`` with the ``Options`` built from its
config section (``jobs/run_config.py``), so each stage's ``Options`` stays the one place its
options are defined and checked.

A stage is skipped when nothing it depends on changed, by the rule of
:mod:`sbert_pipeline.stage_api.stage_records`: its *fingerprint* covers its name, its options
(Beam options and ``overwrite`` excepted: where a stage runs, and whether it replaces an output,
do not change what it writes), its external inputs (corpus files by path, size and content
digest, hashed on every run, since an edit can keep a file's size and time; the model by id and
weights sha256; the finetune config and data files) and the *identity* of each upstream output
(the sha256 of its manifest). So an upstream stage that ran again makes its downstream stages
run again, and a stage never starts from a half-written output.

The job state (``JOB_DIR/_job_state.json``, replaced atomically) records per stage the
fingerprint it ran with, the identity of the output it wrote, its time and the process's peak
RSS at its start and end. A stage's entry is removed before it runs, so a run that dies leaves
no entry claiming an output that is being replaced (a stage that fails before touching its
output gets its entry back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sbert_pipeline.io.output_dir import MANIFEST, join, read_json_or_none
from sbert_pipeline.io.resources import release_free_memory
from sbert_pipeline.io.sizes import format_size
from sbert_pipeline.jobs.run_config import RunConfig, stage_options
from sbert_pipeline.jobs.run_inputs import CheckedInputs
from sbert_pipeline.jobs.run_table import VECTORS_STAGE, stage_spec
from sbert_pipeline.jobs.stage_cli import stage_package
from sbert_pipeline.stage_api import stage_records
from sbert_pipeline.stage_api.job_stage import JobStage
from sbert_pipeline.stage_api.options import BEAM_FIELD
from sbert_pipeline.stage_api.stage_records import stage_fingerprint


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
        upstream = {name: upstream_identities[name] for name in self.upstream}
        return stage_fingerprint(self.name, self.options.to_dict(), self.inputs, upstream)

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


def output_identity(plan: StagePlan) -> str | None:
    """sha256 of the stage output's manifest; None when there is no complete output."""
    return stage_records.output_identity(plan.output, plan.manifest_name)


def read_stage_manifest(plan: StagePlan) -> dict | None:
    """The stage output's manifest, or None when the output is not complete (or its manifest
    is empty or unparsable, as after a failed write: the stage then runs again)."""
    return read_json_or_none(join(plan.output, plan.manifest_name))


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


def stage_facts(plan: StagePlan) -> dict[str, Any]:
    """The key counts of a stage's complete output (empty when it has none).

    Read from the output itself (manifest, Parquet footers), so a skipped stage reports the
    same numbers as the run that wrote it.
    """
    manifest = read_stage_manifest(plan)
    return {} if manifest is None else plan.spec.facts(manifest)
