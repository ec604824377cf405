"""The search stage: queries -> their nearest neighbours in an index/ (FAISS).

``search.run(search.Options(index="out/index", query=("a question",)))`` searches; the options
are in ``options.py``, the run in ``stage.py`` (loaded when it runs: FAISS and torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sbert_pipeline.search.options import Options

# Its line in `sbert --help`.
SUMMARY = "nearest neighbours of query texts in an index"

if TYPE_CHECKING:
    from sbert_pipeline.search.stage import SearchResult

__all__ = ["Options", "run"]


def run(options: Options, *, pipeline: Any = None) -> SearchResult:
    """Search the index for the queries (see ``pipelines/search/stage.py``)."""
    from sbert_pipeline.search.stage import run as run_stage

    return run_stage(options, pipeline=pipeline)
