"""The verify stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``).

Between pairs and dedup: it reads the pairs folder and writes a verified pairs folder, which
dedup then reads instead of the pairs (``pipelines/dedup/job_stage.py``).
"""

from __future__ import annotations

from typing import Any

from pipelines.stage_api.job_stage import JobContext, JobStage, ReportContext

# The fact "pairs the cross-encoder scored".
SCORED_FACT = "verified"


def _wire(context: JobContext) -> dict[str, Any]:
    # Texts come from the embeddings when the job keeps them, else from the job's corpus.
    keeps_text = bool(context.corpus.get("keep_text"))
    return {
        "pairs": context.folders["pairs"],
        "output": context.folders["verify"],
        "corpus": None if keeps_text else context.corpus["path"],
        "verify": context.verify,
    }


def _facts(manifest: dict) -> dict:
    section = manifest.get("verify") or {}
    counts, movement = section.get("counts") or {}, section.get("movement") or {}
    return {
        SCORED_FACT: counts.get("scored"),
        "above band": counts.get("above_band"),
        "below band": counts.get("below_band"),
        "crossed up": movement.get("up"),
        "crossed down": movement.get("down"),
    }


def _report(context: ReportContext) -> list[str]:
    from pipelines.verify.report_section import verify_sections

    return verify_sections(context)


JOB_STAGE = JobStage(
    name="verify",
    folder="verify",
    inputs=("pairs",),
    wire=_wire,
    facts=_facts,
    headline=((SCORED_FACT, "pairs verified by the cross-encoder"),),
    report=_report,
)
