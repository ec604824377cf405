"""The embed stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``).

The corpus options come from the job's ``input:`` section (cluster and dedup read the corpus
too), the model from its ``model:``; the ``embed:`` section holds the rest.
"""

from __future__ import annotations

from typing import Any

from sbert_pipeline.embed.file_records import run_facts
from sbert_pipeline.stage_api.input_files import corpus_files, model_identity, named_paths
from sbert_pipeline.stage_api.job_stage import JobContext, JobStage


def _wire(context: JobContext) -> dict[str, Any]:
    corpus = context.corpus
    read = {
        "format": corpus["format"],
        "text_field": corpus["text_field"],
        "id_field": corpus["id_field"],
        "keep_fields": tuple(corpus["keep_fields"]),
        "keep_text": corpus["keep_text"],
        "max_record_bytes": corpus["max_record_bytes"],
    }
    return {
        "input": corpus["path"],
        "output": context.folders["embed"],
        "model": context.folders["finetune"] if context.from_finetune else context.model,
        # An input: key left out (None) is the stage's own default.
        **{key: value for key, value in read.items() if value is not None},
    }


def _reads(stage: JobStage, context: JobContext) -> tuple[str, ...]:
    return ("finetune",) if context.from_finetune else ()


def _preflight(options: Any) -> None:
    # Threads and batching, and the device when the workers are this process (torch loads).
    from sbert_pipeline.stage_api.beam_options import is_local, pipeline_options

    options.check_launcher(workers_here=is_local(pipeline_options(list(options.beam_options))))


def _external_paths(options: Any, context: JobContext) -> list[tuple[str, str]]:
    # The corpus is the job's input.path, which the job keeps apart itself (the other stages
    # read it too); the model is outside the job unless the finetune stage writes it.
    return [] if context.from_finetune else named_paths("model", [options.model])


def _external_inputs(options: Any, context: JobContext) -> dict:
    # The corpus files by content, the model by its identity (the finetune stage's output is
    # an upstream output, whose manifest is in the fingerprint already).
    corpus = corpus_files(options.input, "input.path")
    return {"corpus": corpus, "model": None if context.from_finetune else model_identity(options)}


def _vector_dim(described: dict) -> int | None:
    return (described.get("model") or {}).get("dim")


JOB_STAGE = JobStage(
    name="embed",
    folder="embeddings",
    inputs=(),
    wire=_wire,
    reads=_reads,
    needs_corpus=True,
    preflight=_preflight,
    external_paths=_external_paths,
    external_inputs=_external_inputs,
    vector_dim=_vector_dim,
    facts=run_facts,
    headline=(("read", "rows read"), ("embedded", "embedded"), ("rejected", "rejected")),
)
