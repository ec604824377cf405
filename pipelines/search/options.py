"""Options of the search stage (``sbert search``, ``search.Options``).

Beam-free: the command line is generated from these fields (``jobs/options_cli.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from sbert_pipeline.stage_api.model_options import QueryModelOptions
from sbert_pipeline.stage_api.options import OptionError, at_least, option
from sbert_pipeline.stage_api.shared_options import verify_option

# What --output may be: JSON lines, or a table for spreadsheets.
OUTPUT_SUFFIXES = (".jsonl", ".tsv")


@dataclass(frozen=True)
class Options(QueryModelOptions):
    """Search an index built by sbert index: each query text is encoded as the corpus was,
    and its k nearest items are printed (or written to a file)."""

    INPUT_OPTIONS = ("index", "queries", "model")
    DOCS = ("docs/models.md",)

    query: tuple[str, ...] = option(
        (),
        "query texts (or use --queries FILE)",
        cli={"positional": True, "nargs": "*", "metavar": "QUERY"},
    )
    index: str = option(help="an sbert index output directory", required=True, metavar="DIR")
    queries: str | None = option(
        help="UTF-8 file with one query per line (blank lines are skipped)", metavar="FILE"
    )
    output: str | None = option(help="write hits to FILE.jsonl or FILE.tsv", metavar="FILE")
    k: int = option(10, "neighbours per query (default 10)")
    json: bool = option(False, "print JSON lines instead of text")
    verify: bool = verify_option("the index files")

    def check(self) -> None:
        """Refuse bad values before the index is opened or the model loaded."""
        super().check()
        at_least("k", self.k, 1)
        if bool(self.query) == bool(self.queries):
            raise OptionError("queries", "give query texts or --queries FILE (exactly one of them)")
        if self.output and PurePath(self.output).suffix not in OUTPUT_SUFFIXES:
            raise OptionError(
                "output", f"must end in {' or '.join(OUTPUT_SUFFIXES)}: {self.output}"
            )
        blank = [n for n, query in enumerate(self.query, start=1) if not query.strip()]
        if blank:
            raise OptionError("query", f"query {blank[0]} on the command line is empty")
