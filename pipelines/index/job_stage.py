"""The index stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``)."""

from __future__ import annotations

from typing import Any

from sbert_pipeline.stage_api.job_stage import OWN_VECTORS, JobContext, JobStage


def _wire(context: JobContext) -> dict[str, Any]:
    return {
        "embeddings": context.folders["embed"],
        "output": context.folders["index"],
        "verify": context.verify,
        **OWN_VECTORS,
    }


def _runs_pipelines(options: Any) -> bool:
    # The index is built in this process unless it is sharded over Beam workers.
    return options.shards is not None


def _facts(manifest: dict) -> dict:
    return {
        "vectors": manifest.get("ntotal"),
        "factory": manifest.get("factory"),
        "recall@10": manifest.get("recall_at_10"),
    }


JOB_STAGE = JobStage(
    name="index",
    folder="index",
    inputs=("embed",),
    wire=_wire,
    runs_pipelines=_runs_pipelines,
    facts=_facts,
)
