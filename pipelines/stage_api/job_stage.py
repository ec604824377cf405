"""How a stage takes part in ``sbert run``: the descriptor each stage package exports.

A stage package's ``job_stage.py`` defines ``JOB_STAGE``, a :class:`JobStage`: where the stage
writes in the job directory, which stages it reads, which of its options the job sets (its inputs
and output, from the job's folders), the job's own defaults, what it reads from outside the job
(kept apart from the job directory and fingerprinted by content), its checks against the stages
it reads, which facts of its manifest the summary shows and its sections of ``report.html``.
``sbert run`` (``jobs/run_table.py``) lists the descriptors in run order, one line each; it
knows nothing else about a stage, and calls the hooks below for every stage alike:

1. when the config is loaded (``--print-config`` too): ``required``, ``needs_corpus``,
   ``check_upstream``;
2. before the job directory is touched: ``external_paths`` (the job directory lies apart from
   all of them), then, the job directory being the job's, ``external_inputs`` and
   ``vector_dim``;
3. then, stage by stage in run order: ``check_vectors`` and ``preflight``.

A stage runs only when every check of every stage passed.

Beam-free: ``sbert run --print-config`` and the checks before a job load no Beam.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class JobContext:
    """What a job gives every stage (see :attr:`JobStage.wire`).

    Attributes:
        job_dir: the job directory.
        folders: every stage -> its output folder in the job directory.
        corpus: the job's ``input:`` section (``path``, ``format``, ``text_field``, ``id_field``,
            ``keep_fields``, ``keep_text``, ``max_record_bytes``).
        model: the model the embed stage uses: a name, a folder, or the finetune stage's
            output when ``from_finetune``.
        from_finetune: ``model: finetune``, the model the finetune stage of this job writes.
        verify: check inputs against their recorded digests (the job's ``verify:``).
        stages: the stages listed in this job.
    """

    job_dir: str
    folders: Mapping[str, str]
    corpus: Mapping[str, Any]
    model: str
    from_finetune: bool
    verify: bool
    stages: tuple[str, ...]


@dataclass(frozen=True)
class ReportContext:
    """What a stage's report section is rendered from.

    Attributes:
        job_dir: the job directory (links are relative to it).
        outputs: stage -> its output folder, for the stages of this job.
        options: stage -> the ``Options`` it ran with, for the stages of this job.
        verify: the job's ``verify:`` (the report reads files the way the stages did).
    """

    job_dir: str
    outputs: Mapping[str, str]
    options: Mapping[str, Any]
    verify: bool


# The columns of vectors from outside (``ExternalVectorOptions``): in a job, the vectors are
# the embed stage's, so the job sets them (to none).
OWN_VECTORS = {"embedding_field": None, "id_field": None, "text_field": None, "model_name": None}


def _reads_inputs(stage: JobStage, context: JobContext) -> tuple[str, ...]:
    return stage.inputs


def _runs_pipelines(options: Any) -> bool:
    return True


def _no_facts(manifest: dict) -> dict:
    return {}


def _nothing_outside(options: Any, context: JobContext) -> list[tuple[str, str]]:
    return []


def _no_external_inputs(options: Any, context: JobContext) -> dict:
    return {}


@dataclass(frozen=True)
class JobStage:
    """One stage of ``sbert run``.

    Attributes:
        name: the stage's name in ``stages:``, its config section and its package.
        folder: its output folder under the job directory.
        inputs: the stages whose outputs it always reads (they must be listed with it).
        wire: the options the job sets, from the job (inputs, output, verify); a config
            section may not set them.
        reads: the stages it reads in this job, when that depends on the config (``inputs``
            otherwise).
        job_defaults: defaults of the job that differ from the command's (``pairs.threshold``:
            the command writes no pairs without one; a job does).
        runs_pipelines: whether, with these options, it runs Beam pipelines (and so gets the
            job's Beam options).
        required: options its section must set, each with what it is (``finetune.config``: a
            finetune YAML); checked when the config is loaded.
        needs_corpus: whether the job's ``input.path`` must be given (embed reads the corpus).
        check_upstream: checks of its options against the options of the stages it reads in
            this job (stage -> ``Options``), which no stage can make alone; run when the config
            is loaded. Raises ValueError naming the config keys.
        preflight: the checks of its options that need this machine or the files (a device,
            a labels file), run for every stage before the job's first stage runs.
        external_paths: ``(config key, path or glob)`` of what its options name outside the
            job; the job directory may not be, hold or lie in any of them. Checked before
            anything is opened; raises FileNotFoundError or ValueError naming the config key.
        external_inputs: what its options name outside the job, checked and described by
            content (``stage_api/input_files.py``) so that a change of their content reruns it;
            its part of the stage's fingerprint. Called for every stage before the preflights,
            once the job directory is known to be the job's.
        vector_dim: the dimension of the vectors its output gives, from its described external
            inputs (None: not known before it runs).
        check_vectors: checks of its options against the dimension of the vectors it reads,
            when known before any stage runs (an index factory string). Raises ValueError
            naming the config key.
        manifest: the file that marks its output complete (written last, on success); None:
            the project's ``_manifest.json`` (``pipelines/io/output_dir.py``).
        facts: the key counts of its output, from its manifest (summary table and report).
        headline: (fact, label) pairs shown as the report's headline numbers.
        report: its sections of ``report.html``, when its output is complete.
    """

    name: str
    folder: str
    inputs: tuple[str, ...]
    wire: Callable[[JobContext], dict[str, Any]]
    reads: Callable[[JobStage, JobContext], tuple[str, ...]] = _reads_inputs
    job_defaults: Mapping[str, Any] = field(default_factory=dict)
    runs_pipelines: Callable[[Any], bool] = _runs_pipelines
    required: Mapping[str, str] = field(default_factory=dict)
    needs_corpus: bool = False
    check_upstream: Callable[[Any, Mapping[str, Any]], None] | None = None
    preflight: Callable[[Any], None] | None = None
    external_paths: Callable[[Any, JobContext], list[tuple[str, str]]] = _nothing_outside
    external_inputs: Callable[[Any, JobContext], dict] = _no_external_inputs
    vector_dim: Callable[[dict], int | None] | None = None
    check_vectors: Callable[[Any, int], None] | None = None
    manifest: str | None = None
    facts: Callable[[dict], dict] = _no_facts
    headline: tuple[tuple[str, str], ...] = ()
    report: Callable[[ReportContext], list[str]] | None = None

    def upstream(self, context: JobContext) -> tuple[str, ...]:
        """The stages whose outputs this stage reads in this job."""
        return self.reads(self, context)
