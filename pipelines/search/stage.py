"""The search stage: the nearest neighbours of queries in an ``sbert index`` output.

Run from Python as ``search.run(search.Options(index="out/index", query=("a question",)))``,
or with the command ``sbert search`` (its ``--help`` lists the options).

Queries are encoded with the model that embedded the corpus (recorded in the index manifest);
``--model`` may name another copy of it, and is refused if it is not the same model with the
same settings. Queries keep the index's dimensions (its ``truncate_dim``) and get the model's
``query`` prompt when the corpus was embedded with its ``document`` prompt (as
sentence-transformers' ``encode_query`` / ``encode_document``), else the corpus's own prompt;
``--prompt-name`` / ``--prompt`` choose another. Each hit has the corpus id, a score (cosine
similarity for metric ``ip``, squared L2 distance for ``l2``) and the text when the embeddings
kept it. ``--json`` prints one JSON object per query; ``--output`` writes ``.jsonl`` or ``.tsv``.

The ``.tsv`` is for spreadsheets, which run a cell starting with ``=``, ``+``, ``-`` or ``@`` as a
formula (CSV injection): a query, id or text cell starting with one of these (or with a tab or
carriage return) gets a leading ``'``, as OWASP advises, which spreadsheets hide. The ``.jsonl``
output keeps every value exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from sbert_pipeline.index.faiss_ops import prepare_vectors
from sbert_pipeline.index.files import LoadedIndex, open_index
from sbert_pipeline.io.atomic import write_text_replacing
from sbert_pipeline.search.hits import Hit, QueryHits, SearchSummary
from sbert_pipeline.search.options import Options
from sbert_pipeline.search.query_encoder import QueryEncoder, load_query_encoder
from sbert_pipeline.stage_api.result import Result
from sbert_pipeline.vectors.cosine_range import clamp_cosines

from sbert_core.errors import DataFileError

if TYPE_CHECKING:
    import pyarrow as pa

    from sbert_core import SentenceEncoder


@dataclass(frozen=True)
class SearchResult(Result):
    """A finished search: ``output`` is the hits file, or None when the hits are only returned
    (and printed by ``sbert search``); ``manifest`` is empty (a search publishes none); the
    ``summary`` is a :class:`SearchSummary`, with every hit; :meth:`to_arrow` and
    ``to_pandas()`` give the hits as a table."""

    as_json: bool = False

    def to_arrow(self) -> pa.Table:
        """The hits, one row per hit (:meth:`SearchSummary.to_arrow`), whether or not they
        were written to a file."""
        return self.summary.to_arrow()

    def line(self) -> str:
        """What ``sbert search`` prints: the one-line summary when the hits went to a file,
        else the hits themselves, as JSON lines (``--json``) or as text."""
        if self.output:
            return self.summary.line()
        if self.as_json:
            return self.summary.to_jsonl().removesuffix("\n")
        return self.summary.to_text()


def read_queries(path: str) -> list[str]:
    """Queries from a UTF-8 file, one per line as written; blank lines are skipped.

    Raises:
        DataFileError: an unreadable file, or one holding no query.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataFileError(f"cannot read the query file {path}: {err}") from err
    queries = [line for line in text.splitlines() if line.strip()]
    if not queries:
        raise DataFileError(f"{path} holds no queries (every line is blank)")
    return queries


def search(
    loaded: LoadedIndex, encoder: QueryEncoder | SentenceEncoder, queries: list[str], k: int
) -> tuple[QueryHits, ...]:
    """Encode ``queries`` and look up their ``k`` nearest corpus entries.

    ``encoder`` is a :class:`QueryEncoder` (the prompt and settings of the index) or a bare
    encoder, whose ``encode`` defaults apply.
    """
    vectors = prepare_vectors(encoder.encode(queries), loaded.metric)
    scores, positions = loaded.index.search(vectors, k)
    if loaded.metric == "ip":  # cosines of unit vectors; l2 scores are squared distances
        scores = clamp_cosines(scores)
    found = positions >= 0  # -1 pads rows when the index holds fewer than k vectors
    ids, texts = loaded.ids.lookup(positions[found])
    rows = np.nonzero(found)[0]
    hits: list[list[Hit]] = [[] for _ in queries]
    for row, score, id_, text in zip(rows, scores[found], ids, texts, strict=True):
        hits[row].append(Hit(len(hits[row]) + 1, id_, float(score), text))
    return tuple(QueryHits(q, tuple(h)) for q, h in zip(queries, hits, strict=True))


def run(options: Options, *, pipeline: Any = None) -> SearchResult:
    """Search the index for the queries; writes ``options.output`` when given.

    Args:
        options: the search's options.
        pipeline: accepted so that every stage has the same signature; search runs no
            pipeline.

    Raises:
        DataFileError: an unreadable query file or one holding no query.
        IncompatibleEmbeddingsError: ``model`` differs from the index's model.
        ValueError: a ``truncate_dim`` other than the index's, or an unknown prompt name.
        FileNotFoundError, CorruptIndexError: a missing, unfinished or damaged index directory.
    """
    queries = read_queries(options.queries) if options.queries else list(options.query)
    loaded = open_index(options.index, verify_checksums=options.verify)
    encoder = load_query_encoder(options, loaded)
    start = time.perf_counter()
    results = search(loaded, encoder, queries, options.k)
    summary = SearchSummary(
        options.index,
        loaded.metric,
        options.k,
        results,
        options.output,
        time.perf_counter() - start,
    )
    if options.output:
        content = summary.to_tsv() if options.output.endswith(".tsv") else summary.to_jsonl()
        write_text_replacing(options.output, content)
    return SearchResult(options.output, {}, summary, as_json=options.json)
