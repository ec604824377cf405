"""The pairs stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``)."""

from __future__ import annotations

from typing import Any

from sbert_pipeline.stage_api.job_stage import OWN_VECTORS, JobContext, JobStage, ReportContext


def _wire(context: JobContext) -> dict[str, Any]:
    return {
        "embeddings": (context.folders["embed"],),
        "output": context.folders["pairs"],
        "verify": context.verify,
        **OWN_VECTORS,
    }


def _facts(manifest: dict) -> dict:
    return {"pairs": manifest.get("counts", {}).get("pairs"), "method": manifest.get("method")}


def _report(context: ReportContext) -> list[str]:
    from sbert_pipeline.pairs.report_section import pairs_sections

    return pairs_sections(context)


JOB_STAGE = JobStage(
    name="pairs",
    folder="pairs",
    inputs=("embed",),
    wire=_wire,
    # Pairs at or above this cosine are written; dedup can only group pairs that were
    # written. The command writes no pairs/ without one.
    job_defaults={"threshold": 0.8},
    facts=_facts,
    headline=(("pairs", "similar pairs"),),
    report=_report,
)
