"""The config of ``sbert run``: typed sections, YAML loading, ``--set`` overrides, validation.

A job config is one YAML mapping (see ``examples/quickstart.yaml``)::

    job_dir: out/quickstart           # every stage writes a folder here; report.html too
    input:                            # the corpus, read as `sbert embed` reads it
      path: examples/sample_corpus.jsonl
      id_field: id
      keep_text: true
    model: all-MiniLM-L6-v2           # or a model directory, or `finetune`
    runner: local                     # or DataflowRunner, SparkRunner, FlinkRunner, ...
    beam: {}                          # other Beam pipeline options, as Beam spells them
    verify: true                      # false: later stages skip the inputs' sha256 check
                                      # (also verify_inputs:, where verify: is the stage's)
    incremental: false                # true: stages reuse their previous output for the rows
                                      # that did not change (a section may say false)
    memory_budget: auto               # or a size (4GB): every stage with --memory-budget gets
                                      # it, unless its section sets its own (auto: each
                                      # stage's default, auto where it has the shared option)
    stages: [embed, index, cluster, pairs, dedup]
    cluster: {k: 40}
    dedup: {threshold: 0.9}

Which stages run is the ``stages`` list (there are no per-stage enabled flags): they always run
in the order finetune, embed, index, cluster, pairs, verify, dedup whatever order the list gives,
and a stage needs the stages it reads from (index, cluster and pairs need embed; verify and dedup
need pairs, and dedup reads verify's pairs when the job has verify; ``model: finetune`` needs
finetune). Without embed, ``embeddings:`` names the vectors index, cluster and pairs read
instead: an ``sbert embed`` output folder, or a Parquet dataset with its columns named::

    embeddings: out/old_job/embeddings        # an embed output (its _manifest.json)
    embeddings: {path: vectors/, embedding_column: vec, id_column: doc_id}   # a dataset

``embeddings:`` in a job with embed is refused (embed makes the vectors); ``input:`` is then
optional, the corpus dedup and the cluster summaries read when given.

Each stage section holds that stage's options: the fields of the stage's ``Options``
(``pipelines/<stage>/options.py``), which are its command's flags with ``_`` for ``-``
(``memory_budget`` is ``sbert index --memory-budget``), checked by that same type. The options
the job sets itself (inputs, output, ``--overwrite``, ``--verify``, the Beam options) are
refused there. ``options:``, a mapping of flags spelled as on the command line, is still read,
as one more way to write the same fields. A parameter left out is the stage's own default, or
the job's where it has one (``pairs.threshold`` 0.8, ``dedup.threshold`` 0.9);
``--print-config`` shows them all.

Relative paths are relative to the working directory. ``${VAR}`` in any value is replaced by the
environment variable VAR (as in ``sbert submit`` configs). Everything is checked before the job
directory is touched: unknown keys, wrong types and values (NaN is in no range), missing stages,
input files that do not exist and a model that cannot be found each give one message naming the
key. YAML aliases (``&anchor`` / ``*alias``) are refused, in the file and in ``--set`` values: a
few lines of nested aliases expand to billions of values ("billion laughs").
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sbert_pipeline.io.resources import AUTO, resolve_budget
from sbert_pipeline.jobs.run_table import (
    DEFAULT_STAGES,
    MODEL_STAGE,
    STAGE_NAMES,
    VECTORS_STAGE,
    stage_folders,
    stage_spec,
)
from sbert_pipeline.jobs.stage_cli import stage_package
from sbert_pipeline.stage_api.job_stage import JobContext
from sbert_pipeline.stage_api.options import BEAM_FIELD, options_from_mapping
from sbert_pipeline.stage_api.shared_options import ExternalVectorOptions
from sbert_pipeline.stage_api.stage_records import JOB_STATE_FILE

from sbert_core import DEFAULT_MODEL
from sbert_core.config import apply_override, config_from_dict, config_to_dict, read_config_file

# The order stages run in (the stage table's); each reads only what the ones before it wrote.
STAGE_ORDER: tuple[str, ...] = STAGE_NAMES
# The job-wide digest check is `verify:` (a bool); with a verify stage section under that key,
# it is written `verify_inputs:`.
VERIFY_KEY, INPUT_CHECKS_KEY = "verify", "verify_inputs"
# The job's record of finished stages, in the job directory; its presence marks a job's folder.
STATE_FILE = JOB_STATE_FILE
# The effective config (after --set), kept in the job directory next to what it produced.
CONFIG_COPY = "job.yaml"
LOCAL_RUNNER = "local"
# Runners whose workers run on other machines, which cannot read the submitting machine's disk:
# their paths need one of the remote schemes.
_CLUSTER_RUNNERS = ("DataflowRunner", "SparkRunner", "FlinkRunner", "PortableRunner")
REMOTE_SCHEMES = ("gs://", "s3://", "hdfs://")  # filesystems every worker can reach
# A section's mapping of flags as spelled on the command line (read as more fields).
LEGACY_OPTIONS = "options"
# The stage option the job-wide ``incremental: true`` turns on (docs/architecture.md,
# "Incremental runs").
INCREMENTAL_FIELD = "incremental"
# The stage option the job-wide ``memory_budget:`` fills (pipelines/io/resources.py).
MEMORY_BUDGET_FIELD = "memory_budget"


@dataclass
class InputConfig:
    """The corpus: a glob on any Beam filesystem and how to read it (``sbert embed`` options).

    The embed stage reads it; cluster and dedup read its texts and order too.
    """

    path: str = ""
    # None: each file's format from its extension.
    format: Literal["txt", "jsonl", "csv", "tsv", "parquet"] | None = None
    text_field: str = "text"
    # None: ids derived from file and row (stable across reruns).
    id_field: str | None = None
    keep_fields: list[str] = field(default_factory=list)
    # On by default: the cluster summaries, the dedup groups and the report show texts.
    keep_text: bool = True
    max_record_bytes: int | None = None


@dataclass
class EmbeddingsInput:
    """Vectors made before the job (``embeddings:``), read by index, cluster and pairs when the
    job has no embed stage: an ``sbert embed`` output folder, or a Parquet dataset (a folder of
    ``*.parquet``, one file or a glob) whose columns are named as the stages' ``--embedding-field``
    ... options name them (``pipelines/io/external_vectors.py``)."""

    path: str = ""
    embedding_column: str | None = None
    id_column: str | None = None
    text_column: str | None = None
    model_name: str | None = None

    def columns(self) -> dict[str, str | None]:
        """The stages' external-vector options (``ExternalVectorOptions``) for these vectors."""
        return {
            "embedding_column": self.embedding_column,
            "id_column": self.id_column,
            "text_column": self.text_column,
            "model_name": self.model_name,
        }


@dataclass
class RunConfig:
    """A whole ``sbert run`` job: the job-wide keys, and each stage's section as written."""

    job_dir: str = ""
    input: InputConfig = field(default_factory=InputConfig)
    model: str = DEFAULT_MODEL
    stages: list[str] = field(default_factory=lambda: list(DEFAULT_STAGES))
    # "local" is Beam's in-process FnApiRunner; any other name is passed as --runner.
    runner: str = LOCAL_RUNNER
    # Beam pipeline options besides the runner, spelled as Beam spells them.
    beam: dict[str, Any] = field(default_factory=dict)
    # The stages that read earlier stages' outputs check each file against the digest of its
    # manifest first; false turns that off (sizes and the file list are still checked).
    verify: bool = True
    # Every stage that can reuse its previous output (embed, index, cluster, pairs: their
    # ``incremental`` option) does so, unless its section says ``incremental: false``.
    incremental: bool = False
    # The memory the whole process may use: a size or "auto" (pipelines/io/resources.py),
    # given to every stage whose Options has ``memory_budget`` unless its section sets one.
    memory_budget: str = AUTO
    # Vectors from outside the job, read in place of the embed stage's output.
    embeddings: EmbeddingsInput = field(default_factory=EmbeddingsInput)
    # Stage -> its section (checked against the stage's Options by stage_options).
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)

    def enabled(self, stage: str) -> bool:
        """Whether ``stage`` is in the stages list."""
        return stage in self.stages

    def ordered_stages(self) -> list[str]:
        """The listed stages in the order they run."""
        return [stage for stage in STAGE_ORDER if stage in self.stages]

    @property
    def is_local(self) -> bool:
        """True for the in-process runner."""
        return self.runner == LOCAL_RUNNER

    @property
    def external_embeddings(self) -> bool:
        """True when the stages read ``embeddings:`` instead of an embed stage's output."""
        return bool(self.embeddings.path.strip()) and not self.enabled(VECTORS_STAGE)

    def context(self) -> JobContext:
        """What the job gives its stages (folders, corpus, model, verify); with ``embeddings:``
        the embed "folder" the stages read is that input."""
        folders = stage_folders(self.job_dir)
        if self.external_embeddings:
            folders[VECTORS_STAGE] = self.embeddings.path
        return JobContext(
            job_dir=self.job_dir,
            folders=folders,
            corpus=dataclasses.asdict(self.input),
            model=self.model,
            from_finetune=self.model == MODEL_STAGE,
            verify=self.verify,
            stages=tuple(self.stages),
        )


def load_run_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> RunConfig:
    """Read a job config, apply ``--set`` overrides, expand ``${VAR}`` and check the values.

    Only the config itself is checked here; ``sbert_pipeline.jobs.run_inputs.check_job_inputs``
    looks at files and the model.

    Args:
        path: the YAML file.
        overrides: ``key.path=value`` strings (``dedup.threshold=0.95``), applied in order;
            values are read as YAML (``[embed, index]`` is a list, ``null`` clears).

    Raises:
        FileNotFoundError: no such config file.
        ValueError: invalid YAML, an unknown key or stage, a value of the wrong type or out of
            range, a stage without the stages it needs; the message names the key.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"job config {path} does not exist")
    data = read_config_file(path)  # refuses YAML aliases
    for override in overrides:
        try:
            apply_override(data, override)
        except ValueError as err:
            raise ValueError(f"--set {override}: {err}") from None
    data = _expand_variables(data, path)
    try:
        config = _config_of(data)
        validate(config)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return config


def _config_of(data: dict) -> RunConfig:
    """The job-wide keys typed by :class:`RunConfig`, the stage sections kept as written."""
    if "sections" in data:
        raise ValueError("sections: not a key of a job config; write each stage's section by name")
    checks = data.pop(INPUT_CHECKS_KEY, None)
    if isinstance(data.get("embeddings"), str):  # `embeddings: DIR`, the path alone
        data["embeddings"] = {"path": data["embeddings"]}
    sections = {}
    for name in STAGE_NAMES:
        section = data.pop(name, None)
        if section is None:
            continue
        if name == VERIFY_KEY and isinstance(section, bool):
            # `verify: true|false` is the job's digest check, as it always was; a mapping is
            # the verify stage's section.
            data[VERIFY_KEY] = section
            continue
        if not isinstance(section, Mapping):
            raise ValueError(f"{name}: must be a mapping of that stage's options")
        sections[name] = dict(section)
    if checks is not None:
        if VERIFY_KEY in data:
            raise ValueError(
                f"{INPUT_CHECKS_KEY}: the same setting as verify: true|false; give one of them"
            )
        data[VERIFY_KEY] = checks
    config = config_from_dict(RunConfig, data)
    config.sections = sections
    return config


def stage_options(config: RunConfig, name: str) -> Any:
    """Stage ``name``'s ``Options`` in this job: its section (the job's defaults under it), and
    what the job sets itself (inputs, output, verify; ``overwrite`` and the Beam options are
    set when it runs).

    Raises:
        ValueError: an unknown or job-owned key, a wrong type or a value the stage refuses,
            naming ``name.key``.
    """
    spec = stage_spec(name)
    options_type = stage_package(name).Options
    section = dict(config.sections.get(name, {}))
    legacy = section.pop(LEGACY_OPTIONS, None) or {}
    if not isinstance(legacy, Mapping):
        raise ValueError(f"{name}.{LEGACY_OPTIONS}: must be a mapping of flags to values")
    for key, value in legacy.items():
        key_name = str(key).lstrip("-").replace("-", "_")
        if key_name in section:
            raise ValueError(f"{name}.{LEGACY_OPTIONS}.{key}: set it as {name}.{key_name}")
        section[key_name] = value
    fields = {item.name for item in dataclasses.fields(options_type)}
    owned = {**_wired(config, spec.wire(config.context())), "overwrite": False}
    if BEAM_FIELD in fields:
        owned[BEAM_FIELD] = ()
    values = {**spec.job_defaults, **section}
    if config.incremental and INCREMENTAL_FIELD in fields:
        values.setdefault(INCREMENTAL_FIELD, True)
    # A size is given to every stage that has the option; "auto" leaves each stage at its own
    # default, which is "auto" wherever the option is the shared memory_budget_option().
    if MEMORY_BUDGET_FIELD in fields and config.memory_budget.strip().lower() != AUTO:
        values.setdefault(MEMORY_BUDGET_FIELD, config.memory_budget)
    return options_from_mapping(options_type, values, name, owned=owned)


def _wired(config: RunConfig, wired: dict[str, Any]) -> dict[str, Any]:
    """A stage's job-set options, for a job that reads ``embeddings:``: the vectors' columns
    where the input is a Parquet dataset, and no corpus where the job has none."""
    if not config.external_embeddings:
        return wired
    # The config's keys (embeddings.id_column) are the stages' field options (id_field).
    columns = {
        ExternalVectorOptions.RENAMED.get(key, key): value
        for key, value in config.embeddings.columns().items()
    }
    wired = {key: columns.get(key, value) for key, value in wired.items()}
    corpus = config.input.path
    # Without a corpus the options that name it (dedup's corpus, cluster's text_from) are unset.
    return {key: None if value == corpus == "" else value for key, value in wired.items()}


def job_owned(config: RunConfig, name: str) -> set[str]:
    """The options of stage ``name`` the job sets itself (left out of ``--print-config``)."""
    return {*stage_spec(name).wire(config.context()), "overwrite", BEAM_FIELD}


def all_stage_options(config: RunConfig) -> dict[str, Any]:
    """Stage -> its ``Options``, for the listed stages and any other stage with a section."""
    shown = [name for name in STAGE_ORDER if config.enabled(name) or name in config.sections]
    return {name: stage_options(config, name) for name in shown}


def config_as_dict(config: RunConfig) -> dict:
    """The effective config as plain YAML/JSON values (what ``--print-config`` shows): the
    job-wide keys, then every shown stage's options with its defaults filled in."""
    values = config_to_dict(config)
    values.pop("sections")
    shown = all_stage_options(config)
    if VERIFY_KEY in shown:  # the verify stage's section takes the key
        values[INPUT_CHECKS_KEY] = values.pop(VERIFY_KEY)
    for name, options in shown.items():
        owned = job_owned(config, name)
        values[name] = {key: v for key, v in options.to_dict().items() if key not in owned}
    return values


def validate(config: RunConfig) -> None:
    """Check values and stage dependencies (no file access); raises ValueError naming the key."""
    _validate_stage_list(config)
    _validate_embeddings(config)
    _validate_stage_inputs(config)
    if not config.job_dir.strip():
        raise ValueError("job_dir: required (the directory every stage writes under)")
    _validate_stage_needs(config)
    if config.input.max_record_bytes is not None and config.input.max_record_bytes < 1:
        raise ValueError(
            f"input.max_record_bytes: must be at least 1, got {config.input.max_record_bytes}"
        )
    _validate_memory_budget(config.memory_budget)
    _validate_runner(config)
    _validate_between_stages(config, all_stage_options(config))


def _validate_stage_list(config: RunConfig) -> None:
    """``stages:`` lists known stages, each once."""
    if not config.stages:
        raise ValueError(f"stages: list at least one of: {', '.join(STAGE_ORDER)}")
    for position, stage in enumerate(config.stages):
        if stage not in STAGE_ORDER:
            raise ValueError(
                f"stages[{position}]: {stage!r} is not one of: {', '.join(STAGE_ORDER)}"
            )
    repeated = sorted({stage for stage in config.stages if config.stages.count(stage) > 1})
    if repeated:
        raise ValueError(f"stages: {', '.join(repeated)} listed more than once")


def _validate_stage_inputs(config: RunConfig) -> None:
    """Every listed stage has the stages it reads (the vectors stage's output may be
    ``embeddings:``)."""
    for stage in config.stages:
        missing = [need for need in stage_spec(stage).inputs if need not in config.stages]
        if config.external_embeddings and VECTORS_STAGE in missing:
            missing.remove(VECTORS_STAGE)
        if missing:
            raise ValueError(
                f"stages: {stage} reads the output of {', '.join(missing)}; add it to stages"
                + (
                    f" (or name vectors made before in embeddings:, without {VECTORS_STAGE})"
                    if missing == [VECTORS_STAGE]
                    else ""
                )
            )


def _validate_stage_needs(config: RunConfig) -> None:
    """What the listed stages need from the job: the corpus, the stage ``model:`` names, the
    keys their sections must set."""
    listed = [stage_spec(name) for name in config.ordered_stages()]
    if any(spec.needs_corpus for spec in listed) and not config.input.path.strip():
        raise ValueError("input.path: required (a file or glob of the corpus)")
    if config.model == MODEL_STAGE and not config.enabled(MODEL_STAGE):
        raise ValueError(
            f"model: '{MODEL_STAGE}' means the model the {MODEL_STAGE} stage writes; add "
            f"{MODEL_STAGE} to stages or name a model (all-MiniLM-L6-v2 or a model directory)"
        )
    for spec in listed:
        section = config.sections.get(spec.name) or {}
        for key, what in spec.required.items():
            if not section.get(key):
                raise ValueError(f"{spec.name}.{key}: required with the {spec.name} stage ({what})")


def _validate_embeddings(config: RunConfig) -> None:
    """``embeddings:`` only in a job without embed (whose own output the stages read)."""
    given = bool(config.embeddings.path.strip())
    if given and config.enabled(VECTORS_STAGE):
        raise ValueError(
            f"embeddings: the stages read the {VECTORS_STAGE} stage's output in this job; remove "
            f"{VECTORS_STAGE} from stages to read these vectors instead, or remove embeddings: "
            f"to {VECTORS_STAGE} input:"
        )
    columns = {key: value for key, value in config.embeddings.columns().items() if value}
    if columns and not given:
        raise ValueError(f"embeddings.{next(iter(columns))}: set embeddings.path too")
    if columns and not config.embeddings.embedding_column:
        raise ValueError(
            f"embeddings.{next(iter(columns))}: applies to a Parquet dataset; name its vector "
            "column in embeddings.embedding_column"
        )
    if config.embeddings.embedding_column and not config.embeddings.id_column:
        raise ValueError("embeddings.id_column: required with embeddings.embedding_column")


def _validate_memory_budget(value: str) -> None:
    """A size or ``auto`` (what ``--memory-budget`` takes), refused here, before any file."""
    try:
        resolve_budget(value)
    except ValueError as err:
        raise ValueError(f"memory_budget: {err}") from None


def _validate_runner(config: RunConfig) -> None:
    if not config.runner.strip():
        raise ValueError(f"runner: '{LOCAL_RUNNER}' or a Beam runner name such as DataflowRunner")
    if "runner" in config.beam:
        raise ValueError("beam.runner: set the runner with the top-level key runner")
    if config.runner.rsplit(".", 1)[-1] not in _CLUSTER_RUNNERS:
        return
    paths = (
        ("job_dir", config.job_dir),
        ("input.path", config.input.path),
        ("embeddings.path", config.embeddings.path),
    )
    for key, value in paths:
        if value and not value.startswith(REMOTE_SCHEMES):
            raise ValueError(
                f"{key}: {value!r} is a local path, which {config.runner} workers cannot read; "
                f"use {', '.join(REMOTE_SCHEMES)} (or runner: {LOCAL_RUNNER})"
            )


def _validate_between_stages(config: RunConfig, options: Mapping[str, Any]) -> None:
    """Each listed stage's checks against the options of the stages it reads in this job, which
    no stage can make alone."""
    context = config.context()
    for name in config.ordered_stages():
        spec = stage_spec(name)
        if spec.check_upstream is not None:
            upstream = {
                other: options[other] for other in spec.upstream(context) if other in options
            }
            spec.check_upstream(options[name], upstream)


def _expand_variables(data: dict, path: Path) -> dict:
    """The config with ``${VAR}`` replaced, checked the way ``sbert submit`` checks its configs."""
    from sbert_pipeline.jobs.submit import expand_variables

    return expand_variables(data, path)
