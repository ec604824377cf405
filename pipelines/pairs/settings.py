"""What every part of the pairs stage shares, Beam-free: the settings a worker carries, the
scratch folder's name, the metrics' namespace, and how a shard is written."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from sbert_pipeline.io.atomic import write_parquet_replacing
from sbert_pipeline.pairs.vector_reader import VectorReader
from sbert_pipeline.vectors.precision import Precision

METRICS_NAMESPACE = "sbert_pairs"
# Scratch files of a run inside its attempt area (the launcher removes it before publishing).
WORK_DIR = "_work"
# Markers of the searched block groups under WORK_DIR, which the launcher counts for progress.
SEARCHED_DIR = "searched"


@dataclass(frozen=True)
class PairsSettings:
    """What every worker needs, all plain values (pickled into the pipeline)."""

    output: str
    reader: VectorReader
    k: int
    threshold: float | None
    precision: Precision = "auto"


def write_parquet(path: str, table: pa.Table, schema: pa.Schema) -> int:
    """Write ``table`` to ``path`` whole (under a temporary name, then renamed); its rows."""
    return write_parquet_replacing(path, iter([table]), schema)
