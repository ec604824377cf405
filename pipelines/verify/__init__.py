"""The verify stage: pairs/ -> verified pairs/ (each candidate pair scored by a cross-encoder).

``verify.run(verify.Options(pairs="out/pairs", model="out/ce", output="out/verified"))`` scores
them; the options are in ``options.py``, the run in ``stage.py`` (loaded when it runs: the
cross-encoder, torch and Beam).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbert_pipeline.verify.options import Options

# Its line in `sbert --help`.
SUMMARY = "score candidate pairs with a cross-encoder, for dedup (retrieve, then verify)"

if TYPE_CHECKING:
    import apache_beam as beam
    from sbert_pipeline.stage_api.result import Result

__all__ = ["SUMMARY", "Options", "run"]


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Score the pairs and publish the verified pairs folder (see ``pipelines/verify/stage.py``)."""
    from sbert_pipeline.verify.stage import run as run_stage

    return run_stage(options, pipeline=pipeline)
