"""The verify stage in ``sbert run``: ``JOB_STAGE`` (see ``pipelines/stage_api/job_stage.py``).

Between pairs and dedup: it reads the pairs folder and writes a verified pairs folder, which
dedup then reads instead of the pairs (``pipelines/dedup/job_stage.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sbert_pipeline.stage_api.input_files import model_files, named_paths
from sbert_pipeline.stage_api.job_stage import JobContext, JobStage, ReportContext

# The fact "pairs the cross-encoder scored".
SCORED_FACT = "verified"


def _wire(context: JobContext) -> dict[str, Any]:
    # Texts come from the embeddings when the job keeps them (or from the text column of own
    # vectors, where the job has no corpus), else from the job's corpus, read as embed read it.
    corpus = context.corpus
    if corpus.get("keep_text") or not corpus.get("path"):
        return {**_folders(context), "corpus": None}
    read = {"id_field": corpus["id_field"], "text_field": corpus["text_field"]}
    return {**_folders(context), "corpus": corpus["path"], **read, "format": corpus["format"]}


def _folders(context: JobContext) -> dict[str, Any]:
    return {
        "pairs": context.folders["pairs"],
        "output": context.folders["verify"],
        "verify": context.verify,
    }


def _external_paths(options: Any, context: JobContext) -> list[tuple[str, str]]:
    return named_paths("verify.model", [options.model])


def _external_inputs(options: Any, context: JobContext) -> dict:
    # The cross-encoder's folder file by file: a model retrained into it reruns verify. A name
    # that is no folder is described by itself: the preflight refuses it if it is none on the
    # Hub either, saying what verify needs.
    if not Path(options.model).expanduser().is_dir():
        return {"model": {"name": options.model}}
    return {"model": model_files(options.model, "verify.model")}


def _preflight(options: Any) -> None:
    # The cross-encoder's kind and label count, from its config (no weights), so that a model
    # verify cannot use (or no model at all) stops the job before embed and pairs run and
    # before the job folder is made.
    from sbert_pipeline.verify.model_check import check_cross_encoder

    from sbert_core.errors import ModelLoadError

    try:
        check_cross_encoder(options.model, key="model")
    except ModelLoadError as err:
        raise ValueError(str(err)) from None  # it names the folder


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
    from sbert_pipeline.verify.report_section import verify_sections

    return verify_sections(context)


JOB_STAGE = JobStage(
    name="verify",
    folder="verify",
    inputs=("pairs",),
    wire=_wire,
    preflight=_preflight,
    external_paths=_external_paths,
    external_inputs=_external_inputs,
    facts=_facts,
    headline=((SCORED_FACT, "pairs verified by the cross-encoder"),),
    report=_report,
)
