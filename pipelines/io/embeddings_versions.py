"""Which rows of an ``embeddings/`` folder are unchanged since a previous version of it.

An incremental run (``--incremental``) of a stage downstream of embed reuses what it computed
for rows that did not change. The unit of "unchanged" is the Parquet part: an incremental embed
keeps the parts of unchanged input files under their names and digests, so a part listed with
the same path and sha256 in the previous and the current embeddings manifest holds the same rows
(same ids, same vectors). Every other current row is new; a previous row outside the unchanged
parts is gone (removed, or changed and back as a new row under the same id). Nothing else of
embed's layout is relied on (docs/architecture.md, "Incremental runs").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from sbert_pipeline.io.embeddings import EmbeddingsDataset, count_rows
from sbert_pipeline.io.output_dir import relative_to


def part_digests(manifest: Mapping) -> dict[str, str] | None:
    """``{relative part path: sha256}`` of the embeddings parts (top level) a manifest's commit
    lists; None for a manifest written before staged commits (no digests to compare)."""
    commit = manifest.get("commit")
    if not isinstance(commit, Mapping):
        return None
    digests = {}
    for entry in commit.get("files", []):
        path = entry.get("path", "")
        if "/" not in path and path.startswith("part-") and path.endswith(".parquet"):
            digests[path] = entry.get("sha256")
    return digests


@dataclass(frozen=True)
class PartChanges:
    """How the current version of an embeddings folder relates to a previous one, by part.

    Attributes:
        unchanged: parts (relative paths) listed in both with the same sha256: the same rows.
        new: current parts that the previous version did not list with this digest.
        gone: previous parts that the current version does not list with that digest.
    """

    unchanged: frozenset[str]
    new: frozenset[str]
    gone: frozenset[str]

    @property
    def reusable(self) -> bool:
        """Whether any row is unchanged (otherwise an incremental run is a full one)."""
        return bool(self.unchanged)


def compare_versions(previous: Mapping, current: Mapping) -> PartChanges:
    """Compare two manifests of the same embeddings folder (the one a downstream stage recorded
    when it last ran, and the one published now) part by part.

    A manifest without digests makes every part new (and every previous part gone): nothing can
    be shown to be unchanged.
    """
    before = part_digests(previous) or {}
    after = part_digests(current) or {}
    unchanged = frozenset(
        path for path, digest in after.items() if digest and before.get(path) == digest
    )
    return PartChanges(
        unchanged=unchanged,
        new=frozenset(after) - unchanged,
        gone=frozenset(before) - unchanged,
    )


def unchanged_row_mask(dataset: EmbeddingsDataset, changes: PartChanges) -> np.ndarray:
    """One bool per row of ``dataset``, in the order its ``batches()`` and ``load()`` yield
    them (its shards in order): True for a row of an unchanged part.

    Row counts come from the Parquet footers; no vector is read.
    """
    masks = []
    for path in dataset.shards:
        rows = count_rows([path])
        masks.append(np.full(rows, relative_to(dataset.directory, path) in changes.unchanged))
    return np.concatenate(masks) if masks else np.zeros(0, bool)
