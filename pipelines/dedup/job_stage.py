"""The dedup stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sbert_pipeline.stage_api.input_files import named_paths
from sbert_pipeline.stage_api.job_stage import JobContext, JobStage, ReportContext

# The dedup fact "how many known duplicate pairs ended in one group".
KNOWN_FACT = "known duplicates found"


def _pairs_stage(context: JobContext) -> str:
    # With a verify stage, dedup groups the cross-encoder's scores of the pairs.
    return "verify" if "verify" in context.stages else "pairs"


def _reads(stage: JobStage, context: JobContext) -> tuple[str, ...]:
    return (_pairs_stage(context),)


def _wire(context: JobContext) -> dict[str, Any]:
    # The corpus gives dedup the corpus order (keep: first), texts for the report and, with
    # apply, the rows to write. With dedup.against the job's embeddings (those the pairs
    # recorded) are the corpus deduplicated against the reference.
    return {
        "pairs": context.folders[_pairs_stage(context)],
        "output": context.folders["dedup"],
        "corpus": context.corpus["path"],
        "verify": context.verify,
        "dry_run": False,
    }


def _preflight(options: Any) -> None:
    from sbert_pipeline.io.filesystems import FileSystems

    if options.labels is not None and not FileSystems.exists(options.labels):
        raise FileNotFoundError(f"--labels {options.labels}: no such file")
    if options.against:  # a reference folder that is not a finished embed output
        from sbert_pipeline.dedup.against import reference_identity

        reference_identity(options.against)


def _check_upstream(options: Any, upstream: Mapping[str, Any]) -> None:
    pairs = upstream.get("pairs")
    if pairs is None:
        # Dedup then cuts the verifier's scores, and the verified pairs hold every candidate
        # whatever its score: a threshold below the pairs' cosine threshold is meaningful.
        return
    if not options.threshold >= pairs.threshold:
        raise ValueError(
            f"dedup.threshold: {options.threshold} is below pairs.threshold {pairs.threshold}, "
            "so pairs between them were never written; lower pairs.threshold or raise "
            "dedup.threshold"
        )
    if options.radius is not None and not options.radius >= pairs.threshold:
        raise ValueError(
            f"dedup.radius: {options.radius} is below pairs.threshold {pairs.threshold}: pairs "
            "under it are not all known; raise dedup.radius"
        )


def _external_paths(options: Any, context: JobContext) -> list[tuple[str, str]]:
    against = [("dedup.against", path) for path in options.against or ()]
    return against + named_paths("dedup.labels", [options.labels] if options.labels else [])


def _external_inputs(options: Any, context: JobContext) -> dict:
    # A reference folder embedded again (new or changed rows) reruns dedup: its manifest's
    # digest changes with every part it lists.
    if not options.against:
        return {}
    from sbert_pipeline.dedup.against import reference_identity

    try:
        return {"against": reference_identity(options.against)}
    except FileNotFoundError:
        # A folder that is no finished embed output: the preflight refuses it with dedup's
        # other checks, before any stage runs, so no fingerprint is made from this.
        return {}


def _facts(manifest: dict) -> dict:
    counts = manifest.get("counts", {})
    facts = {key: counts.get(key) for key in ("groups", "removed", "kept")}
    known = manifest.get("known_duplicates")
    if known:  # the corpus names its duplicates (duplicate_of) or dedup had labels
        facts[KNOWN_FACT] = f"{known['at_threshold']['found']} of {known['pairs']}"
    return facts


def _report(context: ReportContext) -> list[str]:
    from sbert_pipeline.dedup.report_section import dedup_sections

    return dedup_sections(context)


JOB_STAGE = JobStage(
    name="dedup",
    folder="dedup",
    inputs=("pairs",),
    wire=_wire,
    reads=_reads,
    job_defaults={"threshold": 0.9},  # the command requires one
    runs_pipelines=lambda options: False,  # dedup runs in this process
    check_upstream=_check_upstream,
    preflight=_preflight,
    external_paths=_external_paths,
    external_inputs=_external_inputs,
    facts=_facts,
    headline=(
        ("groups", "duplicate groups"),
        ("removed", "removed"),
        ("kept", "kept"),
        (KNOWN_FACT, "known duplicate pairs in one group"),
    ),
    report=_report,
)
