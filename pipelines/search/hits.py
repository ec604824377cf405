"""The hits of a search and how they are written: text for the terminal, JSON lines (every
value exactly), and a table for spreadsheets (``.tsv``) whose cells cannot run as formulas
(:func:`spreadsheet_safe`). Beam-free."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

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

    def to_arrow(self) -> pa.Table:
        """One row per hit, best first within each query: ``query_index`` (int32), ``query``,
        ``rank`` (int32), ``id``, ``score`` (float32: the cosine, or the squared L2 distance
        of an l2 index) and ``text`` (null when the index holds no texts)."""
        import pyarrow as pa  # loaded when the hits are read as a table

        rows = [(n, r.query, hit) for n, r in enumerate(self.results) for hit in r.hits]
        return pa.table(
            {
                "query_index": pa.array([n for n, _, _ in rows], pa.int32()),
                "query": pa.array([query for _, query, _ in rows], pa.string()),
                "rank": pa.array([hit.rank for _, _, hit in rows], pa.int32()),
                "id": pa.array([hit.id for _, _, hit in rows], pa.string()),
                "score": pa.array([hit.score for _, _, hit in rows], pa.float32()),
                "text": pa.array([hit.text for _, _, hit in rows], pa.string()),
            }
        )

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
