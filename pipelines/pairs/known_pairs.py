"""Recall of planted (known) pairs: how many pairs of a list the pairs output found."""

from __future__ import annotations

import pyarrow.parquet as pq
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.pairs_output import read_neighbors, read_pairs


def known_pairs_recall(path: str, output: str, threshold: float | None) -> dict:
    """How many pairs of a known list (Parquet ``id_a``, ``id_b``) the output at ``output``
    found in its neighbour lists and, with a threshold, in its pairs.

    Raises:
        ValueError: the file lacks ``id_a`` or ``id_b`` (named as ``--known-pairs``).
    """
    with FileSystems.open(path) as handle:
        known = pq.read_table(handle)
    missing = {"id_a", "id_b"} - set(known.column_names)
    if missing:
        raise ValueError(f"--known-pairs {path}: no column {', '.join(sorted(missing))}")
    a = known["id_a"].to_pylist()
    b = known["id_b"].to_pylist()
    table = read_neighbors(output, set(a) | set(b))
    lists = {row["id"]: set(row["neighbor_ids"]) for row in table.to_pylist()}
    present = [(x, y) for x, y in zip(a, b, strict=True) if x in lists and y in lists]
    in_lists = sum(1 for x, y in present if y in lists[x] or x in lists[y])
    result = {
        "file": path,
        "pairs": len(a),
        "unknown_ids": len(a) - len(present),
        "in_neighbors": in_lists,
        "recall_in_neighbors": in_lists / len(present) if present else None,
    }
    if threshold is not None:
        found = read_pairs(output)
        keys = set(zip(found["id_a"].to_pylist(), found["id_b"].to_pylist(), strict=True))
        in_pairs = sum(1 for x, y in present if (min(x, y), max(x, y)) in keys)
        result["in_pairs"] = in_pairs
        result["recall_in_pairs"] = in_pairs / len(present) if present else None
    return result
