"""What an incremental pairs run (``--incremental``) may reuse of the folder's previous output.

The previous version is the output folder's published manifest, read and verified before the
run prepares its output. It is reused only when it was written by this stage (``kind: pairs``,
not rewritten by ``sbert verify``) with the same settings: method, ``k``, threshold, precision,
normalisation, the same model identity, and the same embeddings directories in the same order.
Its ``embeddings`` section holds the embeddings manifests it was computed from; each is
compared with the current manifest of that directory
(:func:`sbert_pipeline.io.embeddings_versions.compare_versions`): rows of parts listed in both with
the same digest are OLD, every other current row is NEW, and previous ids outside the unchanged
parts are GONE (a changed row comes back as NEW under its id).

Otherwise the run is a full one and says why (one INFO line, and the manifest's ``incremental``
section). Either way, with ``--incremental`` the stage may replace its own previous output
without ``--overwrite``; a folder holding anything this stage did not write is refused as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from sbert_pipeline.io.embeddings import EmbeddingsDataset, parquet_source
from sbert_pipeline.io.embeddings_versions import compare_versions
from sbert_pipeline.io.output_dir import MANIFEST, join, read_json_or_none, relative_to
from sbert_pipeline.io.pairs_output import VERIFY_SECTION, read_neighbors
from sbert_pipeline.io.previous_output import NOT_ASKED, model_change, previous_output
from sbert_pipeline.pairs.options import Options

# More new rows than this share of all rows: a full run (an incremental one would cost about as
# much, and a clustered one would route most rows through centroids fitted on the old ones).
MAX_NEW_SHARE = 0.5


@dataclass(frozen=True)
class Reuse:
    """What an incremental run reuses: the previous manifest and the OLD rows' ids.

    Attributes:
        previous: the previous pairs manifest.
        old_ids: ids of the current rows in unchanged embeddings parts (string array).
        rows_new: current rows outside them.
        rows_gone: previous rows outside them.
    """

    previous: dict
    old_ids: pa.Array
    rows_new: int
    rows_gone: int

    @property
    def rows_old(self) -> int:
        """Current rows in unchanged embeddings parts (their lists and pairs are reused)."""
        return len(self.old_ids)


def plan_reuse(
    options: Options,
    datasets: Sequence[EmbeddingsDataset],
    method: str,
    normalize: bool,
) -> Reuse | str:
    """What this run can reuse of the output folder's previous version (read and verified
    here, before the run prepares the folder), or why it is a full run (a sentence)."""
    if not options.incremental:
        return NOT_ASKED
    manifest, why = previous_output(options.output, "pairs")
    if manifest is None:
        return why
    if VERIFY_SECTION in manifest:
        return "the previous output was rewritten by sbert verify"
    asked = {
        "method": method,
        "k": options.k,
        "threshold": options.threshold,
        "precision": options.precision,
        "normalized_here": normalize,
    }
    for name, value in asked.items():
        if manifest.get(name) != value:
            return f"{name} changed ({manifest.get(name)!r} before, {value!r} now)"
    if method == "clustered":
        # The blocking as asked (a default number of clusters follows N: not compared).
        section = manifest.get("clustered") or {}
        blocking = {"clusters": options.clusters, "nprobe_requested": options.nprobe}
        for name, value in blocking.items():
            if value is not None and section.get(name) != value:
                return f"clustered {name} changed ({section.get(name)!r} before, {value!r} now)"
    recorded = manifest.get("embeddings") or []
    directories = [entry.get("directory") for entry in recorded]
    if directories != [dataset.directory for dataset in datasets]:
        return f"the embeddings inputs changed ({directories} before)"
    inputs = list(zip((entry.get("manifest") or {} for entry in recorded), datasets, strict=True))
    for before, dataset in inputs:
        reason = model_change(before, dataset.manifest)
        if reason is not None:
            return f"{dataset.directory}: {reason}"
    old = [_unchanged_ids(before, dataset) for before, dataset in inputs]
    old_ids = pa.concat_arrays(old) if old else pa.array([], pa.string())
    total = sum(dataset.count for dataset in datasets)
    if not len(old_ids):
        return "no embeddings part is unchanged since the previous run"
    rows_new = total - len(old_ids)
    if rows_new > MAX_NEW_SHARE * total:
        return f"{rows_new} of {total} rows are new (more than {MAX_NEW_SHARE:.0%})"
    rows_gone = int(manifest.get("counts", {}).get("items", 0)) - len(old_ids)
    return Reuse(manifest, old_ids, rows_new, rows_gone)


def replace_kind(options: Options) -> str | None:
    """The kind of published output this run may replace without ``--overwrite``: with
    ``--incremental``, this stage's own pairs output, but not a folder ``sbert verify`` wrote
    (also ``kind: pairs``): its cross-encoder scores are not this stage's to drop."""
    if not options.incremental:
        return None
    published = read_json_or_none(join(options.output, MANIFEST))
    return None if published is not None and VERIFY_SECTION in published else "pairs"


def _unchanged_ids(previous: dict, dataset: EmbeddingsDataset) -> pa.Array:
    """The ids of ``dataset``'s rows in parts unchanged since ``previous`` (its manifest then)."""
    unchanged = compare_versions(previous, dataset.manifest).unchanged
    parts = []
    for path in dataset.shards:
        if relative_to(dataset.directory, path) in unchanged:
            with parquet_source(path) as source:
                column = pq.read_table(source, columns=["id"])["id"].combine_chunks()
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            parts.append(column.cast(pa.string()))
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


def previous_lists(previous_dir: str, old_ids: pa.Array) -> pa.Table:
    """The previous ``neighbors/`` rows of the OLD ids, one array per column.

    Raises:
        ValueError: the previous output lacks lists of some OLD rows (it cannot have been
            computed from the embeddings its manifest records).
    """
    table = read_neighbors(previous_dir).combine_chunks()
    table = table.filter(pc.is_in(table["id"], value_set=old_ids)).combine_chunks()
    if table.num_rows != len(old_ids):
        raise ValueError(
            f"{previous_dir}: the previous neighbors/ hold lists for {table.num_rows} of the "
            f"{len(old_ids)} unchanged rows; rerun without --incremental (with --overwrite)"
        )
    return table


def positions_in(values: pa.Array | pa.ChunkedArray, ids: pa.Array) -> np.ndarray:
    """The positions of ``values`` (all present) in ``ids``, int64."""
    return pc.index_in(values, value_set=ids).to_numpy(zero_copy_only=False).astype(np.int64)
