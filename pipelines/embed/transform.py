"""The Embed transform: records -> PredictionResults via RunInference, failures as rejections.

Two batching strategies, same results:

* ``bundle`` (default): Reshuffle, then RunInference's own ``BatchElements``. Used on the
  FnApiRunner, Dataflow, Spark and Flink.
* ``grouped``: records are keyed into ``n_groups`` buckets and grouped, each group is one batch
  for a pre-batched RunInference. The Dask runner needs this: it drops what a DoFn emits from
  ``finish_bundle``, which is where ``BatchElements`` emits its last batch.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.ml.inference.base import RunInference
from sbert_pipeline.embed.model_handler import Embedding, InferenceFailure, SbertModelHandler
from sbert_pipeline.embed.read_corpus import REJECTED
from sbert_pipeline.io.corpus_reader import RejectedRow
from sbert_pipeline.io.shards import stable_bucket

EMBEDDED = "embedded"


def _succeeded(result) -> bool:
    return isinstance(result.inference, Embedding)


def _failed(result) -> bool:
    return isinstance(result.inference, InferenceFailure)


def _batch_key(n_groups: int):
    def key(record):
        return stable_bucket(record.id, n_groups), record

    return key


def _group_values(keyed) -> list:
    return list(keyed[1])


def _failure_to_rejection(result) -> RejectedRow:
    record = result.example
    return RejectedRow(record.id, record.source, result.inference.reason, record.text[:200])


class Embed(beam.PTransform):
    """Records -> ``{"embedded": PredictionResult(record, Embedding), "rejected": RejectedRow}``.

    Args:
        handler: the model handler (loads the encoder on each worker).
        n_groups: use ``grouped`` batching with this many buckets; None for ``bundle`` batching.
        reshuffle: in ``bundle`` mode, redistribute records before inference so that it is not
            fused to the reader's parallelism (off when a grouping step already did that).
    """

    def __init__(
        self, handler: SbertModelHandler, *, n_groups: int | None = None, reshuffle: bool = True
    ) -> None:
        super().__init__()
        self._handler = handler
        self._n_groups = n_groups
        self._reshuffle = reshuffle

    def expand(self, records):
        if self._n_groups is not None:
            results = (
                records
                | "KeyByBatch" >> beam.Map(_batch_key(self._n_groups))
                | "GroupIntoBatches" >> beam.GroupByKey()
                | "BatchValues" >> beam.Map(_group_values)
                | "RunInference" >> RunInference(self._handler.with_no_batching())
            )
        else:
            if self._reshuffle:
                records = records | "Reshuffle" >> beam.Reshuffle()
            results = records | "RunInference" >> RunInference(self._handler)
        return {
            EMBEDDED: results | "Succeeded" >> beam.Filter(_succeeded),
            REJECTED: results
            | "Failed" >> beam.Filter(_failed)
            | "FailureToRejection" >> beam.Map(_failure_to_rejection),
        }
