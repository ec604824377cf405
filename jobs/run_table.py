"""The stages of ``sbert run``, one descriptor each: the one place a stage is described.

A :class:`StageSpec` says where a stage writes, what it reads, which command runs it, how its
command line is built from the config, which facts of its manifest the summary and the report
show, and which sections of ``report.html`` it renders. ``sbert run`` plans, fingerprints, runs
and reports every stage from this table alone. Adding a stage is one ``StageSpec`` here, its job
module (``build_parser()``, ``run(argv)``, ``main(argv)``) and its config section in
``jobs/run_config.py`` (named as the stage, listed in ``StageName``).

The functions here take the job's ``RunConfig`` as ``config``; its module builds on this table
(stage names, order, dependencies), so the type is not imported here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

from jobs.run_sections import ReportContext, cluster_sections, dedup_sections, pairs_sections
from pipelines.io.output_dir import MANIFEST, join

# ``model: finetune`` means the model the finetune stage of the same job writes.
FROM_FINETUNE = "finetune"

Head = Callable[[Any, Mapping[str, str]], list[str]]
# The dedup fact "how many known duplicate pairs ended in one group".
KNOWN_FACT = "known duplicates found"


def _no_arguments(config: Any) -> list[str]:
    return []


def _runs_pipelines(config: Any) -> bool:
    return True


def _in_process(config: Any) -> bool:
    return False


def _verify_flag(config: Any) -> list[str]:
    # Only the off switch is written: the default leaves the stages' command lines (and so
    # their fingerprints) as they were.
    return [] if config.verify else ["--no-verify"]


def _no_inputs(config: Any, checked: Any) -> dict:
    return {}


def _no_facts(manifest: dict) -> dict:
    return {}


@dataclass(frozen=True)
class StageSpec:
    """One stage of ``sbert run``.

    Attributes:
        name: the stage's name in ``stages:`` (and its config section's).
        folder: its output folder under the job directory.
        module: the job module that runs it: ``build_parser()``, ``run(argv)``, ``main(argv)``.
        inputs: the stages whose outputs it always reads (they must be listed with it).
        sections: config sections whose fields become its options; its own section's
            ``options:`` mapping is added as written.
        head_keys: config keys its ``head`` writes (left out of the section flags).
        head: its first arguments (inputs and output), from the config and the stage folders.
        tail: arguments after the section flags.
        reads: the stages it reads for this config (``inputs`` unless it depends on it).
        beam: whether it runs Beam pipelines (and so gets the job's Beam options).
        external: its inputs from outside the job, described for its fingerprint.
        check: a check of the config against the checked inputs, before any stage runs.
        manifest: the file that marks its output complete (written last, on success).
        facts: the key counts of its output, from its manifest (summary table and report).
        headline: (fact, label) pairs shown as the report's headline numbers.
        report: its sections of ``report.html``, when its output is complete.
    """

    name: str
    folder: str
    module: str
    inputs: tuple[str, ...]
    head: Head
    sections: tuple[str, ...] = ()
    head_keys: tuple[str, ...] = ()
    tail: Callable[[Any], list[str]] = _no_arguments
    reads: Callable[[Any], tuple[str, ...]] | None = None
    beam: Callable[[Any], bool] = _runs_pipelines
    external: Callable[[Any, Any], dict] = _no_inputs
    check: Callable[[Any, Any], None] | None = None
    manifest: str = MANIFEST
    facts: Callable[[dict], dict] = _no_facts
    headline: tuple[tuple[str, str], ...] = ()
    report: Callable[[ReportContext], list[str]] | None = None

    def upstream(self, config: Any) -> tuple[str, ...]:
        """The stages whose outputs this stage reads in this job."""
        return self.reads(config) if self.reads is not None else self.inputs

    def load(self) -> ModuleType:
        """The stage's job module.

        Raises:
            ValueError: the module is not installed (a stage of a newer version).
        """
        try:
            return importlib.import_module(self.module)
        except ModuleNotFoundError as err:
            if err.name != self.module:
                raise
            raise ValueError(
                f"stages: {self.name} is not available in this installation ({self.module} "
                "is missing); remove it from stages"
            ) from None


def _finetune_head(config: Any, out: Mapping[str, str]) -> list[str]:
    """``sbert finetune`` arguments (``--overwrite`` is added on reruns)."""
    finetune = config.finetune
    return ["--config", finetune.config, *finetune.overrides, "--output", out["finetune"]]


def _finetune_inputs(config: Any, checked: Any) -> dict:
    return checked.finetune or {}


def _finetune_facts(manifest: dict) -> dict:
    return {"steps": manifest.get("training", {}).get("steps")}


def _embed_head(config: Any, out: Mapping[str, str]) -> list[str]:
    model = out["finetune"] if config.model == FROM_FINETUNE else config.model
    return ["--input", config.input.path, "--output", out["embed"], "--model", model]


def _embed_reads(config: Any) -> tuple[str, ...]:
    return ("finetune",) if config.model == FROM_FINETUNE else ()


def _embed_inputs(config: Any, checked: Any) -> dict:
    return {"corpus": [asdict(f) for f in checked.corpus], "model": checked.model}


def _embed_facts(manifest: dict) -> dict:
    counts = manifest.get("counts", {})
    return {key: counts.get(key) for key in ("read", "embedded", "rejected")}


def _embeddings_stage(
    name: str, folder: str, tail: Callable[[Any], list[str]] = _verify_flag, **rest: Any
) -> StageSpec:
    """A stage that reads the embed stage's output with ``--embeddings DIR --output DIR``, runs
    ``jobs.<name>`` and takes its options from its own config section (``tail`` ends with
    ``--no-verify`` where the config turns verification off)."""

    def head(config: Any, out: Mapping[str, str]) -> list[str]:
        return ["--embeddings", out["embed"], "--output", out[name]]

    return StageSpec(
        name=name,
        folder=folder,
        module=f"jobs.{name}",
        inputs=("embed",),
        head=head,
        sections=(name,),
        tail=tail,
        **rest,
    )


def _index_beam(config: Any) -> bool:
    # The index is built in this process unless it is sharded over Beam workers.
    return config.index.shards is not None


def _index_check(config: Any, checked: Any) -> None:
    """A FAISS factory string is checked now, for the model's dimension, not after embedding."""
    from pipelines.index.faiss_ops import new_index

    model = checked.model or (checked.finetune or {}).get("base_model") or {}
    if config.index.factory == "auto" or "dim" not in model:
        return
    try:
        new_index(config.index.factory, int(model["dim"]), config.index.metric)
    except ValueError as err:
        raise ValueError(f"index.factory: {err}") from None


def _index_facts(manifest: dict) -> dict:
    return {
        "vectors": manifest.get("ntotal"),
        "factory": manifest.get("factory"),
        "recall@10": manifest.get("recall_at_10"),
    }


def _cluster_tail(config: Any) -> list[str]:
    # Without texts in the embeddings, the summaries read them from the corpus.
    text_from = [] if config.input.keep_text else ["--text-from", config.input.path]
    return text_from + _verify_flag(config)


def _cluster_facts(manifest: dict) -> dict:
    return {"clusters": manifest.get("k"), "items": manifest.get("counts", {}).get("items")}


def _pairs_facts(manifest: dict) -> dict:
    return {"pairs": manifest.get("counts", {}).get("pairs"), "method": manifest.get("method")}


def _dedup_head(config: Any, out: Mapping[str, str]) -> list[str]:
    # The corpus gives dedup the corpus order (keep: first), texts for the report and, with
    # apply, the rows to write.
    return ["--pairs", out["pairs"], "--output", out["dedup"], "--corpus", config.input.path]


def _dedup_facts(manifest: dict) -> dict:
    counts = manifest.get("counts", {})
    facts = {key: counts.get(key) for key in ("groups", "removed", "kept")}
    known = manifest.get("known_duplicates")
    if known:  # the corpus names its duplicates (duplicate_of) or dedup had labels
        facts[KNOWN_FACT] = f"{known['at_threshold']['found']} of {known['pairs']}"
    return facts


# In run order: each stage reads only what the ones before it wrote.
STAGES: tuple[StageSpec, ...] = (
    StageSpec(
        name="finetune",
        folder="model",
        module="jobs.finetune",
        inputs=(),
        head=_finetune_head,
        beam=_in_process,
        external=_finetune_inputs,
        manifest="sbert_manifest.json",
        facts=_finetune_facts,
    ),
    StageSpec(
        name="embed",
        folder="embeddings",
        module="jobs.embed",
        inputs=(),
        head=_embed_head,
        sections=("input", "embed"),
        head_keys=("input.path",),
        reads=_embed_reads,
        external=_embed_inputs,
        facts=_embed_facts,
        headline=(("read", "rows read"), ("embedded", "embedded"), ("rejected", "rejected")),
    ),
    _embeddings_stage(
        "index",
        "index",
        beam=_index_beam,
        check=_index_check,
        facts=_index_facts,
    ),
    _embeddings_stage(
        "cluster",
        "clusters",
        tail=_cluster_tail,
        facts=_cluster_facts,
        headline=(("clusters", "clusters"),),
        report=cluster_sections,
    ),
    _embeddings_stage(
        "pairs",
        "pairs",
        facts=_pairs_facts,
        headline=(("pairs", "similar pairs"),),
        report=pairs_sections,
    ),
    StageSpec(
        name="dedup",
        folder="dedup",
        module="jobs.dedup",
        inputs=("pairs",),
        head=_dedup_head,
        sections=("dedup",),
        tail=_verify_flag,
        beam=_in_process,  # dedup runs in this process: no Beam options
        facts=_dedup_facts,
        headline=(
            ("groups", "duplicate groups"),
            ("removed", "removed"),
            ("kept", "kept"),
            (KNOWN_FACT, "known duplicate pairs in one group"),
        ),
        report=dedup_sections,
    ),
)
STAGE_NAMES: tuple[str, ...] = tuple(spec.name for spec in STAGES)
_BY_NAME = {spec.name: spec for spec in STAGES}


def stage_spec(name: str) -> StageSpec:
    """The descriptor of stage ``name``."""
    return _BY_NAME[name]


def stage_folders(job_dir: str) -> dict[str, str]:
    """Stage -> its output folder in ``job_dir``."""
    return {spec.name: join(job_dir, spec.folder) for spec in STAGES}


def finetune_argv(config: Any) -> list[str]:
    """``sbert finetune`` arguments of the finetune stage (``--overwrite`` is added on reruns)."""
    return _finetune_head(config, stage_folders(config.job_dir))
