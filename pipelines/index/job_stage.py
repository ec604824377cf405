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


def _check_vectors(options: Any, dim: int) -> None:
    # A factory string is checked for the model's dimension now, not after embedding.
    if options.factory == "auto":
        return
    from sbert_pipeline.index.faiss_ops import new_index

    try:
        new_index(options.factory, dim, options.metric)
    except ValueError as err:
        raise ValueError(f"index.factory: {err}") from None


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
    check_vectors=_check_vectors,
    facts=_facts,
)
