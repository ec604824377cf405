"""Pieces of ``report.html`` the stages' report sections share: escaping, relative links,
member lines and the texts of ids. Every text from the data is HTML-escaped, and every link is
relative to the job directory."""

from __future__ import annotations

import html
import os

import numpy as np
import pyarrow.parquet as pq
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.html import shown_text


def link(*parts: str) -> str:
    """A relative link to a file of the job directory, showing its path."""
    target = escape("/".join(parts))
    return f'<a href="{target}">{target}</a>'


def texts_of(embed_dir: str | None, wanted: set[str]) -> dict[str, str]:
    """Texts of the wanted ids from the embeddings (when they were kept), else none."""
    from sbert_pipeline.io.embeddings import EmbeddingsDataset
    from sbert_pipeline.io.texts import texts_from_embeddings

    if embed_dir is None or not wanted:
        return {}
    try:
        dataset = EmbeddingsDataset.open(embed_dir)
    except (FileNotFoundError, ValueError):
        return {}
    return texts_from_embeddings([dataset], wanted)


def read_column(path: str, column: str) -> np.ndarray | None:
    """One column of a Parquet file, or None when the file does not exist."""
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as handle:
        return pq.read_table(handle, columns=[column]).column(column).to_numpy()


def member(id_: str, text: str | None) -> str:
    """A member's text (cut to REPORT_TEXT_CHARS) with its id, or its id alone."""
    label = f'<code title="id">{escape(id_)}</code>'
    if text is None:
        return label
    return f"{shown_text(text)} {label}"


def relative(job_dir: str, path: str) -> str:
    """``path`` relative to the job directory, with ``/`` separators (a link target)."""
    base = job_dir.rstrip("/") + "/"
    if path.startswith(base):
        return path[len(base) :]
    if "://" not in path:
        return os.path.relpath(path, job_dir).replace(os.sep, "/")
    return path


def escape(text: str) -> str:
    """``text`` HTML-escaped, quotes included."""
    return html.escape(str(text), quote=True)
