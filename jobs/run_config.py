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
    stages: [embed, index, cluster, pairs, dedup]
    cluster: {k: 40}
    dedup: {threshold: 0.9}

Which stages run is the ``stages`` list (there are no per-stage enabled flags): they always run
in the order finetune, embed, index, cluster, pairs, dedup whatever order the list gives, and a
stage needs the stages it reads from (index, cluster and pairs need embed; dedup needs pairs;
``model: finetune`` needs finetune). Each stage section holds that stage's parameters, named as
its command's options with ``_`` for ``-`` (``memory_budget`` is ``sbert index
--memory-budget``), plus ``options:``, a mapping of any other option of that command spelled as
on its command line (checked against the command's own parser). A parameter left out is the
command's own default (``--print-config`` shows it), read from the command's parser.

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from jobs.run_table import FROM_FINETUNE, STAGE_NAMES, STAGES, stage_spec
from sbert_core import DEFAULT_MODEL
from sbert_core.config import apply_override, config_from_dict, config_to_dict, read_config_file
from sbert_core.encoder_settings import EncoderSettings
from sbert_core.pooling import PoolingMode
from sbert_core.precision import DTYPE_NAMES

StageName = Literal["finetune", "embed", "index", "cluster", "pairs", "dedup"]
# The order stages run in (the stage table's); each reads only what the ones before it wrote.
STAGE_ORDER: tuple[str, ...] = STAGE_NAMES
DEFAULT_STAGES = ("embed", "index", "cluster", "pairs", "dedup")
# The job's record of finished stages, in the job directory; its presence marks a job's folder.
STATE_FILE = "_job_state.json"
# The effective config (after --set), kept in the job directory next to what it produced.
CONFIG_COPY = "job.yaml"
LOCAL_RUNNER = "local"
# Runners whose workers run on other machines, which cannot read the submitting machine's disk:
# their paths need one of the remote schemes.
_CLUSTER_RUNNERS = ("DataflowRunner", "SparkRunner", "FlinkRunner", "PortableRunner")
REMOTE_SCHEMES = ("gs://", "s3://", "hdfs://")  # filesystems every worker can reach


@dataclass
class InputConfig:
    """The corpus: a glob on any Beam filesystem and how to read it (``sbert embed`` options)."""

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
class FinetuneStageConfig:
    """The optional first stage: ``sbert finetune --config CONFIG [OVERRIDES]``.

    Its output is ``JOB_DIR/model``; ``model: finetune`` makes the embed stage use it.
    """

    config: str = ""
    overrides: list[str] = field(default_factory=list)


@dataclass
class EmbedConfig:
    """Options of ``sbert embed`` besides input, output and model."""

    dtype: Literal["float32", "float16"] = "float32"
    compute_dtype: str = "float32"
    # What runs the transformer on CPU (``--cpu-backend``); None: the command's default, torch.
    cpu_backend: Literal["torch", "openvino"] | None = None
    pooling: PoolingMode | None = None
    normalize: bool | None = None
    max_error_rate: float = 1.0
    max_seq_length: int | None = None
    device: str | None = None
    threads: int | None = None
    batch_size: int | None = None
    token_budget: int | None = None
    batching: Literal["auto", "bundle", "grouped"] = "auto"
    allow_pickle: bool = False
    # The model's prompt to prepend (``document`` for a corpus searched with ``query``), or a
    # prompt text; neither: the model's default_prompt_name, if any.
    prompt_name: str | None = None
    prompt: str | None = None
    truncate_dim: int | None = None  # Matryoshka: keep the first dimensions
    # Embed each distinct normalised text once (``--exact-dedup``); dedup groups the copies.
    exact_dedup: bool = False
    options: dict[str, Any] = field(default_factory=dict)


# Stage sections: a field left out (None) is the stage command's own default, which
# --print-config and job.yaml show (filled from the command's parser, the one place it is written).


@dataclass
class IndexConfig:
    """Options of ``sbert index`` (None: the command's default)."""

    factory: str | None = None
    memory_budget: str | None = None
    target_recall: float | None = None
    metric: Literal["ip", "l2"] | None = None
    train_sample: int | None = None
    queries: int | None = None
    # None: built in this process; S: a Beam pipeline fills S shards (and gets the Beam options).
    shards: int | None = None
    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClusterConfig:
    """Options of ``sbert cluster`` (None: the command's default)."""

    method: Literal["kmeans", "communities"] | None = None
    # Required for kmeans; communities finds its own number of clusters.
    k: int | None = None
    sample: int | None = None
    iterations: int | None = None
    seed: int | None = None
    threshold: float | None = None
    min_size: int | None = None
    representatives: int | None = None
    terms: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class PairsConfig:
    """Options of ``sbert pairs`` (None: the command's default)."""

    k: int | None = None
    # Pairs at or above this cosine are written; dedup can only group pairs that were written.
    # The job's own default: the command writes no pairs/ without one.
    threshold: float = 0.8
    method: Literal["exact", "clustered", "auto"] | None = None
    clusters: int | None = None
    nprobe: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class DedupConfig:
    """Options of ``sbert dedup`` (None: the command's default)."""

    # The job's own default: the command requires one.
    threshold: float = 0.9
    # components only: which member of a group is kept.
    keep: Literal["first", "longest", "central"] | None = None
    # How pairs become groups (docs/architecture.md, "dedup methods"); default star.
    method: Literal["components", "ranked", "star", "split", "mutual", "average"] | None = None
    # The other methods' kept member: central, corpus, longest, random or column:NAME.
    rank: str | None = None
    # star, split: least score of a member with its representative (default T - 0.10).
    radius: float | None = None
    # Labelled pairs (id columns and a 0/1 label; column names under options:
    # label-id-a, label-id-b, label-column): P/R/F1 of every method over the sweep.
    labels: str | None = None
    # With labels: also the threshold of highest recall whose precision reaches this.
    target_precision: float | None = None
    # Also write the deduplicated corpus (``--corpus INPUT --apply``).
    apply: bool | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunConfig:
    """A whole ``sbert run`` job."""

    job_dir: str = ""
    input: InputConfig = field(default_factory=InputConfig)
    model: str = DEFAULT_MODEL
    stages: list[StageName] = field(default_factory=lambda: list(DEFAULT_STAGES))
    # "local" is Beam's in-process FnApiRunner; any other name is passed as --runner.
    runner: str = LOCAL_RUNNER
    # Beam pipeline options besides the runner, spelled as Beam spells them.
    beam: dict[str, Any] = field(default_factory=dict)
    # The stages that read earlier stages' outputs check each file against the sha256 of its
    # manifest first; false passes them --no-verify (sizes and the file list are still checked).
    verify: bool = True
    finetune: FinetuneStageConfig = field(default_factory=FinetuneStageConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    pairs: PairsConfig = field(default_factory=PairsConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)

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


def load_run_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> RunConfig:
    """Read a job config, apply ``--set`` overrides, expand ``${VAR}`` and check the values.

    Only the config itself is checked here; :func:`check_inputs` looks at files and the model.

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
        config = with_command_defaults(config_from_dict(RunConfig, data))
        validate(config)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    return config


def with_command_defaults(config: RunConfig) -> RunConfig:
    """``config`` with every stage-section field left out (None) set to its command's default.

    The stage commands' parsers are the one place their defaults are written; a stage that is
    not installed and not listed keeps its Nones.

    Raises:
        ValueError: a listed stage is not installed.
    """
    filled = {}
    for spec in STAGES:
        section = getattr(config, spec.name)
        left_out = [
            item.name
            for item in dataclasses.fields(section)
            if item.name != "options" and getattr(section, item.name) is None
        ]
        if not left_out:
            continue  # nothing to look up: its module need not even be imported
        try:
            parser = spec.load().build_parser()
        except ValueError:
            if config.enabled(spec.name):
                raise
            continue
        defaults = {name: parser.get_default(name) for name in left_out}
        filled[spec.name] = dataclasses.replace(section, **defaults)
    return dataclasses.replace(config, **filled)


def config_as_dict(config: RunConfig) -> dict:
    """The effective config as plain YAML/JSON values (what ``--print-config`` shows)."""
    return config_to_dict(config)


def validate(config: RunConfig) -> None:
    """Check values and stage dependencies (no file access); raises ValueError naming the key."""
    if not config.stages:
        raise ValueError(f"stages: list at least one of: {', '.join(STAGE_ORDER)}")
    repeated = sorted({stage for stage in config.stages if config.stages.count(stage) > 1})
    if repeated:
        raise ValueError(f"stages: {', '.join(repeated)} listed more than once")
    for stage in config.stages:
        missing = [need for need in stage_spec(stage).inputs if need not in config.stages]
        if missing:
            raise ValueError(
                f"stages: {stage} reads the output of {', '.join(missing)}; add it to stages"
            )
    if not config.job_dir.strip():
        raise ValueError("job_dir: required (the directory every stage writes under)")
    if config.enabled("embed") and not config.input.path.strip():
        raise ValueError("input.path: required (a file or glob of the corpus)")
    if config.model == FROM_FINETUNE and not config.enabled("finetune"):
        raise ValueError(
            "model: 'finetune' means the model the finetune stage writes; add finetune to stages "
            "or name a model (all-MiniLM-L6-v2 or a model directory)"
        )
    if config.enabled("finetune") and not config.finetune.config.strip():
        raise ValueError("finetune.config: required with the finetune stage (a finetune YAML)")
    _validate_runner(config)
    _validate_stage_values(config)


def _validate_runner(config: RunConfig) -> None:
    if not config.runner.strip():
        raise ValueError(f"runner: '{LOCAL_RUNNER}' or a Beam runner name such as DataflowRunner")
    if "runner" in config.beam:
        raise ValueError("beam.runner: set the runner with the top-level key runner")
    if config.runner.rsplit(".", 1)[-1] not in _CLUSTER_RUNNERS:
        return
    for key, value in (("job_dir", config.job_dir), ("input.path", config.input.path)):
        if value and not value.startswith(REMOTE_SCHEMES):
            raise ValueError(
                f"{key}: {value!r} is a local path, which {config.runner} workers cannot read; "
                f"use {', '.join(REMOTE_SCHEMES)} (or runner: {LOCAL_RUNNER})"
            )


def _validate_stage_values(config: RunConfig) -> None:
    """Value checks that would otherwise fail only when the stage starts, after earlier ones ran."""
    from pipelines.io.sizes import parse_size

    if config.embed.compute_dtype not in DTYPE_NAMES:
        raise ValueError(
            f"embed.compute_dtype: {config.embed.compute_dtype!r} is not one of: "
            f"{', '.join(DTYPE_NAMES)}"
        )
    _check_positive("input.max_record_bytes", config.input.max_record_bytes)
    check_in_range("embed.max_error_rate", config.embed.max_error_rate, 0.0, 1.0)
    if config.embed.prompt_name is not None and config.embed.prompt is not None:
        raise ValueError("embed.prompt_name and embed.prompt: give one of them, not both")
    _check_positive("embed.truncate_dim", config.embed.truncate_dim)
    check_in_range("index.target_recall", config.index.target_recall, 0.0, 1.0, low_open=True)
    try:
        if config.index.memory_budget is not None:
            parse_size(config.index.memory_budget)
    except ValueError as err:
        raise ValueError(f"index.memory_budget: {err}") from None
    _check_positive("index.queries", config.index.queries)
    _check_positive("index.shards", config.index.shards)
    cluster = config.cluster
    if config.enabled("cluster") and cluster.method == "kmeans" and cluster.k is None:
        raise ValueError("cluster.k: required with cluster.method kmeans (number of clusters)")
    if cluster.method == "communities" and cluster.k is not None:
        raise ValueError("cluster.k: applies to method kmeans only; communities finds its own")
    _check_positive("cluster.k", cluster.k)
    _check_positive("cluster.iterations", cluster.iterations)
    _check_positive("cluster.min_size", cluster.min_size)
    check_in_range("cluster.threshold", cluster.threshold, -1.0, 1.0)
    _check_positive("pairs.k", config.pairs.k)
    check_in_range("pairs.threshold", config.pairs.threshold, -1.0, 1.0)
    _check_positive("pairs.clusters", config.pairs.clusters)
    _check_positive("pairs.nprobe", config.pairs.nprobe)
    check_in_range("dedup.threshold", config.dedup.threshold, -1.0, 1.0)
    if config.enabled("dedup") and not config.dedup.threshold >= config.pairs.threshold:
        raise ValueError(
            f"dedup.threshold: {config.dedup.threshold} is below pairs.threshold "
            f"{config.pairs.threshold}, so pairs between them were never written; lower "
            "pairs.threshold or raise dedup.threshold"
        )
    if config.dedup.target_precision is not None:
        check_in_range("dedup.target_precision", config.dedup.target_precision, 0.0, 1.0)
    if config.dedup.radius is not None:
        check_in_range("dedup.radius", config.dedup.radius, -1.0, 1.0)
        if config.enabled("dedup") and not config.dedup.radius >= config.pairs.threshold:
            raise ValueError(
                f"dedup.radius: {config.dedup.radius} is below pairs.threshold "
                f"{config.pairs.threshold}: pairs under it are not all known; raise dedup.radius"
            )


def check_in_range(
    key: str, value: float | None, low: float, high: float, *, low_open: bool = False
) -> None:
    """Refuse ``value`` outside ``[low, high]`` (``(low, high]`` with ``low_open``), and NaN.

    Written as "not inside" rather than "below or above": every comparison with NaN is false,
    so ``value < low or value > high`` lets NaN through.

    Raises:
        ValueError: ``"{key}: must be in [low, high], got value"``.
    """
    if value is None:  # the command's default, of a stage that is not installed
        return
    inside = (low < value <= high) if low_open else (low <= value <= high)
    if not inside:
        bracket = "(" if low_open else "["
        raise ValueError(f"{key}: must be in {bracket}{low:g}, {high:g}], got {value}")


def _check_positive(key: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"{key}: must be at least 1, got {value}")


def _expand_variables(data: dict, path: Path) -> dict:
    """The config with ``${VAR}`` replaced, checked the way ``sbert submit`` checks its configs."""
    from jobs.submit import expand_variables

    return expand_variables(data, path)


def stage_module(stage: str) -> ModuleType:
    """The module of ``stage`` (see :meth:`jobs.run_table.StageSpec.load`)."""
    return stage_spec(stage).load()


def embed_encoder_settings(model: str, embed: EmbedConfig) -> EncoderSettings:
    """The encoder settings of the embed stage: what ``sbert embed`` builds from its flags."""
    return EncoderSettings(
        model=model,
        device=embed.device,
        dtype=embed.compute_dtype,
        backend=embed.cpu_backend or "torch",
        pooling=embed.pooling,
        normalize=embed.normalize,
        max_seq_length=embed.max_seq_length,
        batch_size=embed.batch_size,
        token_budget=embed.token_budget,
        num_threads=embed.threads,
        allow_pickle=embed.allow_pickle,
        prompt_name=embed.prompt_name,
        prompt=embed.prompt,
        truncate_dim=embed.truncate_dim,
        task="document",  # as sbert embed: a corpus is embedded as documents
    )
