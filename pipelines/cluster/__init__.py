"""The cluster stage: embeddings/ -> clusters/ (k-means or communities).

``cluster.run(cluster.Options(embeddings=["out/emb"], output="out/clusters", k=40))`` clusters
them; the options are in ``options.py``, the run in ``stage.py`` (loaded when it runs: Beam).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbert_pipeline.cluster.options import Options

# Its line in `sbert --help`.
SUMMARY = "cluster embeddings: k-means or communities, with summaries"

if TYPE_CHECKING:
    import apache_beam as beam
    from sbert_pipeline.stage_api.result import Result

__all__ = ["Options", "run"]


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Cluster the embeddings and publish the output (see ``pipelines/cluster/stage.py``)."""
    from sbert_pipeline.cluster.stage import run as run_stage

    return run_stage(options, pipeline=pipeline)
