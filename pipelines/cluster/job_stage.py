"""The cluster stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``)."""

from __future__ import annotations

from typing import Any

from sbert_pipeline.stage_api.job_stage import OWN_VECTORS, JobContext, JobStage, ReportContext


def _wire(context: JobContext) -> dict[str, Any]:
    # Without texts in the embeddings, the summaries read them from the corpus.
    keep_text = context.corpus["keep_text"]
    return {
        "embeddings": (context.folders["embed"],),
        "output": context.folders["cluster"],
        "text_from": None if keep_text else context.corpus["path"],
        "verify": context.verify,
        **OWN_VECTORS,
    }


def _facts(manifest: dict) -> dict:
    return {"clusters": manifest.get("k"), "items": manifest.get("counts", {}).get("items")}


def _report(context: ReportContext) -> list[str]:
    from sbert_pipeline.cluster.report_section import cluster_sections

    return cluster_sections(context)


JOB_STAGE = JobStage(
    name="cluster",
    folder="clusters",
    inputs=("embed",),
    wire=_wire,
    facts=_facts,
    headline=(("clusters", "clusters"),),
    report=_report,
)
