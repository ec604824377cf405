"""``sbert search``: the nearest neighbours of queries in an ``sbert index`` output.

    sbert search --index out/index "how do I learn python?" "best pizza in town" [--k 10]
    sbert search --index out/index --queries questions.txt --output hits.jsonl [--k 10]

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

import argparse
import csv
import io
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import apache_beam as beam
import numpy as np

from jobs.model_options import query_encoder_settings
from jobs.parsers.search import build_parser
from pipelines.index.faiss_ops import prepare_vectors
from pipelines.index.files import LoadedIndex, open_index
from pipelines.io.atomic import write_text_replacing
from pipelines.io.embeddings import require_compatible
from pipelines.vectors.cosine_range import clamp_cosines
from sbert_core import SentenceEncoder
from sbert_core.errors import DataFileError

OUTPUT_SUFFIXES = (".jsonl", ".tsv")
# Leading characters that make a spreadsheet read a cell as a formula (OWASP, CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


@dataclass(frozen=True)
class Hit:
    """One neighbour of a query."""

    rank: int
    id: str
    score: float
    text: str | None


@dataclass(frozen=True)
class QueryHits:
    """A query and its neighbours, best first."""

    query: str
    hits: tuple[Hit, ...]

    def to_json(self, metric: str) -> dict:
        """The JSON object ``--json`` prints for this query."""
        return {"query": self.query, "metric": metric, "hits": [asdict(h) for h in self.hits]}


@dataclass(frozen=True)
class SearchSummary:
    """What a finished search reports."""

    index: str
    metric: str
    k: int
    results: tuple[QueryHits, ...]
    output: str | None
    seconds: float

    def line(self) -> str:
        """One-line human summary."""
        target = f" -> {self.output}" if self.output else ""
        return (
            f"searched {len(self.results)} queries for {self.k} neighbours in {self.index} in "
            f"{self.seconds:.2f}s{target}"
        )

    def to_text(self) -> str:
        """Human-readable hits, a block per query."""
        score = "cosine" if self.metric == "ip" else "sq. L2"
        blocks = []
        for result in self.results:
            lines = [f"query: {result.query}"]
            for hit in result.hits:
                text = f"  {hit.text}" if hit.text is not None else ""
                lines.append(f"  {hit.rank:>3}. {score} {hit.score:.4f}  [{hit.id}]{text}")
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks)

    def to_jsonl(self) -> str:
        """One JSON object per query and line."""
        return "".join(json.dumps(r.to_json(self.metric)) + "\n" for r in self.results)

    def to_tsv(self) -> str:
        """One row per hit: query_index, query, rank, id, score, text.

        Query, id and text cells that a spreadsheet would run as a formula are neutralised
        (:func:`spreadsheet_safe`); the numbers are ours and stay as they are.
        """
        buffer = io.StringIO()
        writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
        writer.writerow(["query_index", "query", "rank", "id", "score", "text"])
        for number, result in enumerate(self.results):
            query = spreadsheet_safe(result.query)
            for hit in result.hits:
                text = "" if hit.text is None else spreadsheet_safe(hit.text)
                score = f"{hit.score:.6f}"
                writer.writerow([number, query, hit.rank, spreadsheet_safe(hit.id), score, text])
        return buffer.getvalue()


def spreadsheet_safe(cell: str) -> str:
    """``cell`` with a leading ``'`` if it starts like a spreadsheet formula (``=1+1``, ``@SUM``).

    Example:
        >>> spreadsheet_safe("=1+1"), spreadsheet_safe("plain")
        ("'=1+1", 'plain')
    """
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


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


@dataclass(frozen=True)
class QueryEncoder:
    """The query model and how ``encode`` is called for queries (prompt, batching)."""

    encoder: SentenceEncoder
    encode_kwargs: dict[str, Any]

    def encode(self, queries: list[str]):
        """Query vectors, ``(N, dim)`` float32, as the index's vectors were made."""
        return self.encoder.encode(queries, **self.encode_kwargs)


def load_query_encoder(args: argparse.Namespace, loaded: LoadedIndex) -> QueryEncoder:
    """The index's model (or ``--model``), set up exactly as the embed job was, with the
    query prompt (:func:`query_prompt`).

    Raises:
        ValueError: ``--truncate-dim`` other than the index's, or an unknown prompt name.
        IncompatibleEmbeddingsError: ``--model`` is not the model the index was built with.
    """
    embedded = loaded.embeddings_manifest
    settings = query_encoder_settings(args, embedded)
    if settings.truncate_dim != embedded.get("truncate_dim"):
        raise ValueError(
            f"--truncate-dim {settings.truncate_dim}: the index {args.index} holds "
            f"{embedded.get('dim')}-dimensional vectors (truncate_dim "
            f"{embedded.get('truncate_dim')}); queries must keep the same dimensions"
        )
    settings.validate()
    encoder = settings.load()
    # The copy must make the corpus's vectors: described with the corpus's prompt.
    corpus_side = replace(settings, prompt_name=None, prompt=embedded.get("prompt", ""))
    require_compatible(
        embedded, corpus_side.describe(encoder), f"the index {args.index} and the query model"
    )
    kwargs = settings.encode_kwargs()
    if settings.prompt_name is None and settings.prompt is None:
        kwargs["prompt"] = query_prompt(encoder, embedded)
    encoder.prompts.resolve(kwargs.get("prompt_name"), kwargs.get("prompt"))  # a bad name fails now
    return QueryEncoder(encoder, kwargs)


def query_prompt(encoder: SentenceEncoder, embedded: dict) -> str:
    """The prompt queries get when none is asked for: the model's ``query`` prompt when the
    corpus was embedded with its ``document`` prompt (sentence-transformers' ``encode_query``
    against ``encode_document``; a model without prompts has both empty), else the corpus's
    own prompt, so that queries and corpus are embedded alike."""
    corpus_prompt = embedded.get("prompt", "")  # manifests from before prompts had none
    if corpus_prompt == encoder.prompts.prompts["document"]:
        return encoder.prompts.resolve(task="query")
    return corpus_prompt


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


def run(argv: list[str] | None = None, test_pipeline: beam.Pipeline | None = None) -> SearchSummary:
    """Search the index for the given queries; writes ``--output`` when asked.

    Args:
        argv: search options.
        test_pipeline: accepted so that every job has the same signature; search runs no
            pipeline.

    Raises:
        ValueError: bad options, or both or neither of query texts and ``--queries``.
        DataFileError: an unreadable query file or one holding no query.
        IncompatibleEmbeddingsError: ``--model`` differs from the index's model.
        FileNotFoundError, CorruptIndexError: a missing, unfinished or damaged index directory.
    """
    args = build_parser().parse_args(argv)
    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}")
    if bool(args.query) == bool(args.queries):
        raise ValueError("give query texts or --queries FILE (exactly one of them)")
    if args.output and Path(args.output).suffix not in OUTPUT_SUFFIXES:
        raise ValueError(f"--output must end in {' or '.join(OUTPUT_SUFFIXES)}: {args.output}")
    if args.queries:
        queries = read_queries(args.queries)
    else:
        blank = [n for n, query in enumerate(args.query, start=1) if not query.strip()]
        if blank:
            raise ValueError(f"query {blank[0]} on the command line is empty")
        queries = list(args.query)
    loaded = open_index(args.index, verify_checksums=args.verify)
    encoder = load_query_encoder(args, loaded)
    start = time.perf_counter()
    results = search(loaded, encoder, queries, args.k)
    summary = SearchSummary(
        args.index, loaded.metric, args.k, results, args.output, time.perf_counter() - start
    )
    if args.output:
        output = Path(args.output)
        content = summary.to_tsv() if output.suffix == ".tsv" else summary.to_jsonl()
        write_text_replacing(str(output), content)
    return summary


def main(argv: list[str] | None = None) -> int:
    """CLI entry: print the hits (text or JSON lines), or a summary when writing ``--output``."""
    args = build_parser().parse_args(argv)
    summary = run(argv)
    if args.output:
        print(summary.line())
    elif args.json:
        print(summary.to_jsonl(), end="")
    else:
        print(summary.to_text())
    return 0
