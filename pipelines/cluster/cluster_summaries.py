"""Readable cluster summaries: sizes, representatives, distinctive terms, a histogram and a report.

Given every item's cluster and its cosine score to the cluster's centre, this module builds:

* per cluster: its size, mean score, the members nearest the centre (ids, scores and, when texts
  are known, texts), and its distinctive terms by class-based TF-IDF;
* ``summary.parquet`` (:data:`SUMMARY_SCHEMA`) and a self-contained ``report.html`` with the
  cluster-size histogram drawn as inline SVG (no plotting library needed).

Distinctive terms (whole words, scored by class-based TF-IDF with each cluster's texts as one
document) come from :mod:`sbert_pipeline.cluster.terms`.

Texts come from the embeddings (``--keep-text``) or from the corpus they were embedded from, and
only for the items the summary needs: the representatives and a bounded sample per cluster.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.io.filesystems import FileSystems
from sbert_pipeline.cluster.terms import distinctive_terms
from sbert_pipeline.io.html import SIZE_AXIS, Bins, histogram_svg, shown_text
from sbert_pipeline.vectors.cosine_range import clamp_cosines

SUMMARY_SCHEMA = pa.schema(
    [
        pa.field("cluster", pa.int32(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mean_score", pa.float32()),  # null for an empty cluster
        pa.field("representative_ids", pa.list_(pa.string()), nullable=False),
        pa.field("representative_scores", pa.list_(pa.float32()), nullable=False),
        pa.field("representative_texts", pa.list_(pa.string()), nullable=False),  # null: unknown
        pa.field("terms", pa.list_(pa.string()), nullable=False),
        pa.field("term_scores", pa.list_(pa.float32()), nullable=False),
    ]
)


@dataclass(frozen=True)
class ClusterProfile:
    """What we tell a person about one cluster."""

    cluster: int
    size: int
    mean_score: float | None
    representative_ids: list[str]
    representative_scores: list[float]
    representative_texts: list[str | None]
    terms: list[str]
    term_scores: list[float]


def cluster_sizes(labels: np.ndarray, n_clusters: int) -> np.ndarray:
    """Members per cluster; labels below 0 (not in any cluster) are not counted."""
    return np.bincount(labels[labels >= 0], minlength=n_clusters).astype(np.int64)


def nearest_members(
    labels: np.ndarray, scores: np.ndarray, n_clusters: int, per_cluster: int
) -> list[np.ndarray]:
    """For each cluster, the rows of its ``per_cluster`` highest-scoring members, best first.

    Equal scores go to the lower row. Rows with a negative label belong to no cluster.
    """
    rows = np.flatnonzero(labels >= 0)
    order = rows[np.lexsort((rows, -scores[rows], labels[rows]))]  # by cluster, then score desc
    sizes = cluster_sizes(labels, n_clusters)
    starts = np.cumsum(sizes) - sizes  # one per cluster, also when there are none
    return [order[s : s + min(per_cluster, n)] for s, n in zip(starts, sizes, strict=True)]


def text_sample(
    labels: np.ndarray, n_clusters: int, per_cluster: int, seed: int
) -> list[np.ndarray]:
    """A random sample of at most ``per_cluster`` rows of each cluster (deterministic per seed).

    Terms are computed on this sample so that the cost is bounded by clusters, not by items.
    """
    shuffled = np.random.default_rng(seed).permutation(len(labels))
    shuffled = shuffled[labels[shuffled] >= 0]
    order = shuffled[np.argsort(labels[shuffled], kind="stable")]
    sizes = cluster_sizes(labels, n_clusters)
    starts = np.cumsum(sizes) - sizes
    return [order[s : s + min(per_cluster, n)] for s, n in zip(starts, sizes, strict=True)]


def summarize(
    ids: Sequence[str],
    labels: np.ndarray,
    scores: np.ndarray,
    n_clusters: int,
    texts: dict[str, str],
    *,
    representatives: int = 5,
    term_rows: list[np.ndarray] | None = None,
    top_terms: int = 8,
) -> list[ClusterProfile]:
    """One :class:`ClusterProfile` per cluster, in cluster order.

    Args:
        ids: item ids, row-aligned with ``labels`` and ``scores``.
        labels: cluster of each row (negative: no cluster).
        scores: cosine similarity of each row to its cluster's centre.
        n_clusters: number of clusters.
        texts: ``{id: text}`` for the rows the summary uses (may be empty).
        representatives: members nearest the centre listed per cluster.
        term_rows: rows whose texts feed the terms, per cluster (default: all members).
        top_terms: distinctive terms per cluster.
    """
    scores = clamp_cosines(scores)  # stored cosines stay in [-1, 1]
    sizes = cluster_sizes(labels, n_clusters)
    clustered = labels >= 0
    score_sums = np.bincount(
        labels[clustered], weights=scores[clustered].astype(np.float64), minlength=n_clusters
    )
    nearest = nearest_members(labels, scores, n_clusters, representatives)
    if term_rows is None:
        term_rows = nearest_members(labels, scores, n_clusters, len(labels))
    # One text a line: a period at the end of a text ends a sentence (see terms.py).
    documents = [
        "\n".join(texts[ids[row]] for row in rows if ids[row] in texts) for rows in term_rows
    ]
    terms = distinctive_terms(documents, top_terms) if texts else [[] for _ in range(n_clusters)]
    return [
        ClusterProfile(
            cluster=c,
            size=int(sizes[c]),
            mean_score=float(score_sums[c] / sizes[c]) if sizes[c] else None,
            representative_ids=[ids[row] for row in nearest[c]],
            representative_scores=[float(scores[row]) for row in nearest[c]],
            representative_texts=[texts.get(ids[row]) for row in nearest[c]],
            terms=[term for term, _ in terms[c]],
            term_scores=[score for _, score in terms[c]],
        )
        for c in range(n_clusters)
    ]


def summary_table(summaries: Iterable[ClusterProfile]) -> pa.Table:
    """The ``summary.parquet`` table."""
    rows = [
        {
            "cluster": s.cluster,
            "size": s.size,
            "mean_score": s.mean_score,
            "representative_ids": s.representative_ids,
            "representative_scores": s.representative_scores,
            "representative_texts": s.representative_texts,
            "terms": s.terms,
            "term_scores": s.term_scores,
        }
        for s in summaries
    ]
    return pa.Table.from_pylist(rows, schema=SUMMARY_SCHEMA)


def write_summary(path: str, summaries: Iterable[ClusterProfile]) -> None:
    """Write ``summary.parquet`` on any Beam filesystem."""
    with FileSystems.create(path) as handle:
        pq.write_table(summary_table(summaries), handle)


def clusters_report_html(
    summaries: Sequence[ClusterProfile], facts: dict, *, max_clusters: int = 1000
) -> str:
    """A self-contained HTML report: key facts, the size histogram, and the clusters by size.

    Args:
        summaries: all clusters.
        facts: ``{label: value}`` shown at the top (method, items, objective, model, ...).
        max_clusters: clusters listed (largest first); the rest are in ``summary.parquet``.
    """
    ordered = sorted(summaries, key=lambda s: (-s.size, s.cluster))
    shown = ordered[:max_clusters]
    rows = []
    for s in shown:
        members = "".join(
            f"<li><span class=score>{score:.3f}</span> {_member_html(id_, text)}</li>"
            for id_, score, text in zip(
                s.representative_ids,
                s.representative_scores,
                s.representative_texts,
                strict=True,
            )
        )
        mean = "" if s.mean_score is None else f"{s.mean_score:.3f}"
        rows.append(
            f"<tr><td>{s.cluster}</td><td>{s.size}</td><td>{mean}</td>"
            f"<td>{html.escape(', '.join(s.terms))}</td><td><ol>{members}</ol></td></tr>"
        )
    more = (
        f"<p>Showing the {len(shown)} largest of {len(ordered)} clusters; all are in "
        "<code>summary.parquet</code>.</p>"
        if len(shown) < len(ordered)
        else ""
    )
    fact_rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in facts.items()
    )
    sizes = np.array([s.size for s in summaries], dtype=np.int64)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Clusters</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 72em; }}
table {{ border-collapse: collapse; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left;
          vertical-align: top; }}
ol {{ margin: 0; padding-left: 1.2em; }}
.score {{ color: #777; font-size: 85%; }}
</style></head><body>
<h1>Clusters</h1>
<table>{fact_rows}</table>
<h2>Cluster sizes</h2>
{histogram_svg(Bins.of(sizes, integer=True), SIZE_AXIS, "clusters")}
<h2>Clusters, largest first</h2>
{more}
<table><tr><th>cluster</th><th>size</th><th>mean cos</th><th>distinctive terms</th>
<th>members nearest the centre (cosine)</th></tr>
{"".join(rows)}
</table>
<p>Generated {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}.</p>
</body></html>
"""


def _member_html(id_: str, text: str | None) -> str:
    """A member's text (cut to REPORT_TEXT_CHARS), or its id when the text is unknown."""
    if text is None:
        return f"<code>{html.escape(id_)}</code>"
    return shown_text(text)
