"""The index stage: embeddings/ -> index/ (FAISS), planned under a budget.

``index.run(index.Options(embeddings="out/emb", output="out/index"))`` builds one; the options
are in ``options.py``, the run in ``stage.py`` (loaded when it runs: FAISS and Beam).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbert_pipeline.index.options import Options

# Its line in `sbert --help`.
SUMMARY = "build a FAISS index from embeddings, tuned to a recall target"

if TYPE_CHECKING:
    import apache_beam as beam
    from sbert_pipeline.stage_api.result import Result

__all__ = ["Options", "run"]


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Plan, build, tune and publish the index (see ``pipelines/index/stage.py``)."""
    from sbert_pipeline.index.stage import run as run_stage

    return run_stage(options, pipeline=pipeline)
