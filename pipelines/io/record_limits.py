"""Limits and names of corpus records and embeddings columns that options and help texts quote,
in a module that imports nothing (``sbert embed --help`` loads no pyarrow)."""

from __future__ import annotations

# One record at most (a JSON line, a CSV row, a Parquet text): larger ones are dead-lettered.
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
# A legitimate multi-line CSV field (a quoted paragraph) spans a few dozen lines; a stray quote
# runs on until the next quote character, which in a file of unquoted rows may never come.
DEFAULT_MAX_RECORD_LINES = 1000
# The optional last embeddings column of an ``sbert embed --exact-dedup`` run: a copy's
# representative id, null for the rows embedded themselves (pipelines/embed/exact_copies.py).
COPY_OF = "copy_of"
