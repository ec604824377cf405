"""The verify pipeline: the pairs of the band, with their texts, through the cross-encoder.

The launcher writes the pairs to score as chunk files in the run's work area (``position``,
``text_a``, ``text_b``; :func:`write_chunks`); the pipeline reads them, scores every pair with
``RunInference`` around :class:`~sbert_pipeline.verify.model_handler.CrossEncoderModelHandler` and
writes one score file per chunk (``position``, ``score``); :func:`read_scores` brings them back::

    ListChunks -> ReadChunks (batches) -> Reshuffle -> ScorePairs -> KeyByChunk -> GroupByChunk
               -> WriteScores

A score file is written whole under a temporary name and renamed (``sbert_pipeline.io.atomic``), so
a retried chunk replaces its first attempt and never duplicates rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.ml.inference.base import KeyedModelHandler, PredictionResult, RunInference
from sbert_pipeline.io.atomic import write_table
from sbert_pipeline.io.filesystems import FileSystems
from sbert_pipeline.io.output_dir import join
from sbert_pipeline.verify.model_handler import CrossEncoderModelHandler, CrossEncoderSettings

# Pairs per chunk file: one Beam element of ReadChunks, and one score file.
CHUNK_ROWS = 8192
# Pairs per inference batch, made here rather than by RunInference's BatchElements, whose last
# batch of a bundle Beam's Dask runner drops (the cross-encoder re-batches inside).
BATCH_PAIRS = 1024
CHUNK_SCHEMA = pa.schema(
    [
        pa.field("position", pa.int64(), nullable=False),
        pa.field("text_a", pa.string(), nullable=False),
        pa.field("text_b", pa.string(), nullable=False),
    ]
)
SCORES_SCHEMA = pa.schema(
    [
        pa.field("position", pa.int64(), nullable=False),
        pa.field("score", pa.float32(), nullable=False),
    ]
)


def chunk_path(folder: str, chunk: int) -> str:
    """``folder/chunk-NNNNN.parquet``."""
    return join(folder, f"chunk-{chunk:05d}.parquet")


def scores_path(folder: str, chunk: int) -> str:
    """``folder/scores-NNNNN.parquet``."""
    return join(folder, f"scores-{chunk:05d}.parquet")


def write_chunks(folder: str, text_a: list[str], text_b: list[str]) -> list[str]:
    """The pairs to score as chunk files of :data:`CHUNK_ROWS` pairs; their paths.

    Pair ``i`` (``text_a[i]``, ``text_b[i]``) gets position ``i`` and chunk ``i // CHUNK_ROWS``.
    """
    paths = []
    for chunk, start in enumerate(range(0, len(text_a), CHUNK_ROWS)):
        stop = min(start + CHUNK_ROWS, len(text_a))
        table = pa.Table.from_arrays(
            [
                pa.array(np.arange(start, stop, dtype=np.int64)),
                pa.array(text_a[start:stop], pa.string()),
                pa.array(text_b[start:stop], pa.string()),
            ],
            schema=CHUNK_SCHEMA,
        )
        paths.append(chunk_path(folder, chunk))
        write_table(paths[-1], table)
    return paths


def read_chunk(path: str) -> Iterator[list[tuple[int, tuple[str, str]]]]:
    """``(position, (text_a, text_b))`` of every pair of one chunk file, in batches of at most
    :data:`BATCH_PAIRS`."""
    with FileSystems.open(path) as handle:
        table = pq.read_table(handle, schema=CHUNK_SCHEMA)
    pairs = list(
        zip(
            table.column("position").to_pylist(),
            zip(
                table.column("text_a").to_pylist(),
                table.column("text_b").to_pylist(),
                strict=True,
            ),
            strict=True,
        )
    )
    for start in range(0, len(pairs), BATCH_PAIRS):
        yield pairs[start : start + BATCH_PAIRS]


def key_by_chunk(element: tuple[int, PredictionResult]) -> tuple[int, tuple[int, float]]:
    """``(chunk, (position, score))`` of one scored pair."""
    position, result = element
    return position // CHUNK_ROWS, (position, result.inference)


def write_scores(element: tuple[int, Iterator[tuple[int, float]]], folder: str) -> str:
    """Write one chunk's scores (``position``, ``score``, by position); the file's path."""
    chunk, scored = element
    rows = sorted(scored)
    table = pa.Table.from_arrays(
        [
            pa.array([position for position, _ in rows], pa.int64()),
            pa.array([score for _, score in rows], pa.float32()),
        ],
        schema=SCORES_SCHEMA,
    )
    path = scores_path(folder, chunk)
    write_table(path, table)
    return path


class ScorePairs(beam.PTransform):
    """Score the pairs of the chunk files with the cross-encoder; score files in ``folder``.

    Args:
        chunks: the chunk files (:func:`write_chunks`).
        settings: how each worker loads the cross-encoder.
        folder: where the score files go (the run's work area).
    """

    def __init__(self, chunks: list[str], settings: CrossEncoderSettings, folder: str) -> None:
        super().__init__()
        self._chunks = list(chunks)
        self._settings = settings
        self._folder = folder

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        handler = KeyedModelHandler(CrossEncoderModelHandler(self._settings)).with_no_batching()
        return (
            pbegin
            | "ListChunks" >> beam.Create(self._chunks)
            | "ReadChunks" >> beam.FlatMap(read_chunk)
            | "Reshuffle" >> beam.Reshuffle()
            | "ScorePairs" >> RunInference(handler)
            | "KeyByChunk" >> beam.Map(key_by_chunk)
            | "GroupByChunk" >> beam.GroupByKey()
            | "WriteScores" >> beam.Map(write_scores, self._folder)
        )


def read_scores(folder: str, chunks: int, n: int) -> np.ndarray:
    """``(n,)`` float32: the score of every position, from the ``chunks`` score files.

    Raises:
        ValueError: a score file is missing, or the files do not hold each position once.
    """
    scores = np.full(n, np.nan, np.float32)
    seen = np.zeros(n, np.int64)
    for chunk in range(chunks):
        path = scores_path(folder, chunk)
        if not FileSystems.exists(path):
            raise ValueError(f"the pipeline wrote no scores for chunk {chunk} ({path})")
        with FileSystems.open(path) as handle:
            table = pq.read_table(handle, schema=SCORES_SCHEMA)
        positions = table.column("position").to_numpy()
        if len(positions) and (positions.min() < 0 or positions.max() >= n):
            raise ValueError(f"{path} holds positions outside [0, {n})")
        np.add.at(seen, positions, 1)
        scores[positions] = table.column("score").to_numpy()
    if n and (seen != 1).any():
        missing = int((seen == 0).sum())
        repeated = int((seen > 1).sum())
        raise ValueError(
            f"the pipeline scored {int((seen > 0).sum())} of {n} pairs ({missing} missing, "
            f"{repeated} more than once)"
        )
    return scores
