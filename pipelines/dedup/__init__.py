"""The dedup stage: pairs/ -> dedup/ (duplicate groups, the kept and removed ids, a report).

``dedup.run(dedup.Options(pairs="out/pairs", output="out/dedup", threshold=0.85))`` runs one;
the options are in ``options.py``, the run in ``stage.py`` (loaded when it runs: numpy, scipy,
Arrow).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbert_pipeline.dedup.options import Options

# Its line in `sbert --help`.
SUMMARY = "duplicate groups from similar pairs, with a report"

if TYPE_CHECKING:
    from sbert_pipeline.dedup.stage import DedupResult

__all__ = ["Options", "run"]


def run(options: Options, *, pipeline: object = None) -> DedupResult:
    """Group the duplicates and publish the dedup output (see ``pipelines/dedup/stage.py``)."""
    from sbert_pipeline.dedup.stage import run as run_stage

    return run_stage(options, pipeline=pipeline)
