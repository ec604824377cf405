"""The embed stage: corpus -> embeddings/ (+ _errors/), in Beam.

``embed.run(embed.Options(input="corpus/*.jsonl", output="out/emb"))`` embeds one; ``input``
may also be the rows themselves (a list of texts, a pandas DataFrame or Series, a pyarrow
Table; ``rows_input.py``). The options are in ``options.py``, the run in ``stage.py`` (loaded
when it runs: Beam and torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbert_pipeline.embed.options import Options
from sbert_pipeline.embed.rows_input import is_in_memory, rows_on_disk
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
    input file and takes no ``pipeline``). Rows in memory are written to a temporary Parquet
    file for the run (``pipelines/embed/rows_input.py``)."""
    if is_in_memory(options.input):
        _require_local_wait(options, pipeline)
        spec = (options.input, options.text_field, options.id_field, options.keep_fields)
        with rows_on_disk(*spec) as (path, id_field):
            on_disk = options.replace(input=path, format="parquet", id_field=id_field)
            return run(on_disk, pipeline=pipeline)
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


def _require_local_wait(options: Options, pipeline: beam.Pipeline | None) -> None:
    """Rows in memory are read from a temporary file here, removed when ``run`` returns: the
    workers must be this process's and the run must wait for them."""
    from sbert_pipeline.stage_api.beam_run import options_for, waits, workers_here

    beam_options = options_for(options.beam_options, pipeline)
    if not (workers_here(beam_options, pipeline) and waits(beam_options)):
        raise ValueError(
            "input: rows in memory are read from a temporary file on this machine; run them "
            "with the local runner (no runner option, and waiting), or write them to files "
            "the workers can read"
        )
