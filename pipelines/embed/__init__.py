"""The embed stage: corpus -> embeddings/ (+ _errors/), in Beam.

``embed.run(embed.Options(input="corpus/*.jsonl", output="out/emb"))`` embeds one; the options
are in ``options.py``, the run in ``stage.py`` (loaded when it runs: Beam and torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbert_pipeline.embed.options import Options
from sbert_pipeline.stage_api.options import OptionError

# Its line in `sbert --help`.
SUMMARY = "embed a corpus into Parquet (Beam pipeline)"

if TYPE_CHECKING:
    import apache_beam as beam
    from sbert_pipeline.stage_api.result import Result

__all__ = ["Options", "run"]


def run(options: Options, *, pipeline: beam.Pipeline | None = None) -> Result:
    """Embed the corpus and publish the embeddings (see ``pipelines/embed/stage.py``; with
    ``incremental``, ``pipelines/embed/incremental.py``, whose launcher builds one pipeline per
    input file and takes no ``pipeline``)."""
    if options.incremental:
        if pipeline is not None:
            # The launcher runs one pipeline per input file: a given one would never run.
            raise OptionError(
                "incremental",
                "runs one pipeline per input file from its launcher and takes no pipeline "
                "(call embed.run without pipeline=)",
            )
        from sbert_pipeline.embed.incremental import run_incremental

        return run_incremental(options)
    from sbert_pipeline.embed.stage import run as run_stage

    return run_stage(options, pipeline=pipeline)
