"""The cluster stage's sections of ``report.html``: the cluster-size histogram and the largest
clusters with their distinctive terms and the members nearest the centre."""

from __future__ import annotations

import pyarrow.parquet as pq
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.html import SIZE_AXIS, Bins, histogram_svg
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.stage_api.job_stage import ReportContext
from sbert_pipeline.stage_api.report_parts import escape, link, member, read_column, relative

# How many clusters the page lists; everything else is one link away.
SHOWN_CLUSTERS = 8


def cluster_sections(context: ReportContext) -> list[str]:
    """The cluster-size histogram and the largest clusters."""
    folder = context.outputs["cluster"]
    return [_cluster_sizes(folder), _clusters(context.job_dir, folder)]


def _cluster_sizes(cluster_dir: str) -> str:
    sizes = read_column(join(cluster_dir, "summary.parquet"), "size")
    if sizes is None:
        return ""
    if len(sizes) == 0:
        return "<h2>Cluster sizes</h2><p>No clusters.</p>"
    return (
        f"<h2>Cluster sizes</h2><p>{len(sizes)} clusters, {int(sizes.sum())} items clustered; "
        f"smallest {int(sizes.min())}, largest {int(sizes.max())}.</p>"
        + histogram_svg(Bins.of(sizes, integer=True), SIZE_AXIS, "clusters")
    )


def _clusters(job_dir: str, cluster_dir: str) -> str:
    """The largest clusters with their distinctive terms and the members nearest the centre."""
    path = join(cluster_dir, "summary.parquet")
    if not FileSystems.exists(path):
        return ""
    with FileSystems.open(path) as handle:
        rows = pq.read_table(handle).to_pylist()
    rows.sort(key=lambda row: (-row["size"], row["cluster"]))
    body = []
    for row in rows[:SHOWN_CLUSTERS]:
        members = "".join(
            f'<li><span class="score">{score:.3f}</span> {member(id_, text)}</li>'
            for id_, score, text in zip(
                row["representative_ids"],
                row["representative_scores"],
                row["representative_texts"],
                strict=True,
            )
        )
        body.append(
            f"<tr><td class=num>{row['cluster']}</td><td class=num>{row['size']}</td>"
            f"<td>{escape(', '.join(row['terms']))}</td><td><ol>{members}</ol></td></tr>"
        )
    return (
        f"<h2>Largest clusters</h2><p>{min(len(rows), SHOWN_CLUSTERS)} of {len(rows)} clusters; "
        f"all of them: {link(relative(job_dir, cluster_dir), 'report.html')}.</p>"
        "<table><tr><th>cluster</th><th>size</th><th>distinctive terms</th>"
        f"<th>members nearest the centre (cosine)</th></tr>{''.join(body)}</table>"
    )
