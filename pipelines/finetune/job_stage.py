"""The finetune stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``).

Its output is ``JOB_DIR/model``; ``model: finetune`` makes the embed stage use it.
"""

from __future__ import annotations

from typing import Any

from sbert_pipeline.stage_api.job_stage import JobContext, JobStage


def _wire(context: JobContext) -> dict[str, Any]:
    return {"output": context.folders["finetune"], "print_config": False}


def _facts(manifest: dict) -> dict:
    return {"steps": manifest.get("training", {}).get("steps")}


JOB_STAGE = JobStage(
    name="finetune",
    folder="model",
    inputs=(),
    wire=_wire,
    runs_pipelines=lambda options: False,  # training runs in this process
    manifest="sbert_manifest.json",
    facts=_facts,
)
