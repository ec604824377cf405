"""The pairs stage: embeddings/ -> pairs/ (every item's top-k neighbours, and the pairs above T).

``pairs.run(pairs.Options(embeddings=["out/emb"], output="out/pairs"))`` finds them; the
options are in ``options.py``, the run in ``stage.py`` (loaded when it runs: the search, and
Beam where a pipeline runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbert_pipeline.pairs.options import Options

# Its line in `sbert --help`.
SUMMARY = "all-pairs top-k neighbours and similar pairs of embeddings"

if TYPE_CHECKING:
    import apache_beam as beam
    from sbert_pipeline.stage_api.result import Result

__all__ = ["Options", "run"]


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Search the embeddings and publish the outputs (see ``pipelines/pairs/stage.py``)."""
    from sbert_pipeline.pairs.stage import run as run_stage

    return run_stage(options, pipeline=pipeline)
