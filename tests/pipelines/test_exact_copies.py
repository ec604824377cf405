"""EmbedDistinctTexts: each distinct normalised text through the model once, copies written
with their representative's vector (pipelines/embed/exact_copies.py)."""

from __future__ import annotations

import glob
import json
import random
import zlib

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.textio import WriteToText
from apache_beam.ml.inference.base import PredictionResult
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from sbert_pipeline.embed.exact_copies import (
    CopiedEmbedding,
    EmbedDistinctTexts,
    count_copies,
)
from sbert_pipeline.embed.model_handler import Embedding, InferenceFailure, SbertModelHandler
from sbert_pipeline.embed.read_corpus import REJECTED
from sbert_pipeline.embed.sinks import WriteEmbeddings, output_schema
from sbert_pipeline.embed.transform import (
    EMBEDDED,
    Embed,
    _failed,
    _failure_to_rejection,
    _succeeded,
)
from sbert_pipeline.io.corpus_reader import CorpusRecord
from sbert_pipeline.io.embeddings import shard_paths
from sbert_pipeline.io.record_limits import COPY_OF
from sbert_pipeline.io.schemas import embeddings_schema

# Texts with planted copies: each line is one normalised text, written several ways (case,
# spacing, punctuation, NFKC compatibility forms: full-width letters, the "fi" ligature, a
# no-break space).
PLANTED = [
    [
        "What is fine-tuning?",
        "what is FINE TUNING",
        "  What   is fine tuning?!",
        "Ｗhat is ﬁne-tuning",
    ],
    ["How do I learn Python?", "how do i learn python", "How\u00a0do I learn Python ???"],
    ["Is C# hard?"],  # "C#" keeps its '#': not a copy of "Is C hard?"
    ["Is C hard?"],
    ["Straße", "STRASSE", "strasse."],
]


def _records(order_seed: int | None = None) -> list[CorpusRecord]:
    texts = [text for group in PLANTED for text in group]
    # Ids run against corpus order, so "smallest id" and "first in the corpus" disagree.
    records = [
        CorpusRecord(f"id{len(texts) - row:02d}", text, f"corpus.txt:{row}")
        for row, text in enumerate(texts, start=1)
    ]
    if order_seed is not None:
        random.Random(order_seed).shuffle(records)
    return records


def _first_in_corpus() -> dict[str, str]:
    """Every record's id -> the id of the first record of its planted group (corpus order)."""
    records, out, row = _records(), {}, 0
    for group in PLANTED:
        head = records[row].id
        for _ in group:
            out[records[row].id] = head
            row += 1
    return out


class FakeEmbed(beam.PTransform):
    """Embed's contract with a deterministic fake model: a vector from the text's hash; a text
    containing "FAIL" is rejected. Every text seen is also emitted under ``"seen"``."""

    def expand(self, records):
        results = records | "Infer" >> beam.Map(_fake_inference)
        return {
            EMBEDDED: results | "Succeeded" >> beam.Filter(_succeeded),
            REJECTED: results
            | "Failed" >> beam.Filter(_failed)
            | "ToRejection" >> beam.Map(_failure_to_rejection),
        }


def _fake_inference(record: CorpusRecord) -> PredictionResult:
    if "FAIL" in record.text:
        return PredictionResult(record, InferenceFailure("inference failed: planted"))
    rng = np.random.default_rng(zlib.crc32(record.text.encode("utf-8")))
    return PredictionResult(record, Embedding(rng.standard_normal(4).astype(np.float32), 7, False))


def _as_json(result) -> str:
    inference = result.inference
    copy_of = inference.copy_of if isinstance(inference, CopiedEmbedding) else None
    return json.dumps([result.example.id, inference.vector.tolist(), copy_of])


def _run(records, embed, folder) -> tuple[dict, list]:
    """({id: (vector, copy_of or None)}, rejected rows as dicts) of one pipeline run."""
    with BeamTestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True) as p:
        out = p | beam.Create(records) | EmbedDistinctTexts(embed)
        out[EMBEDDED] | "ToJson" >> beam.Map(_as_json) | "Write" >> WriteToText(f"{folder}/e")
        (
            out[REJECTED]
            | "RejectedToJson" >> beam.Map(lambda row: json.dumps(row.to_dict()))
            | "WriteRejected" >> WriteToText(f"{folder}/r")
        )
    collected = {}
    for line in _lines(folder, "e"):
        id_, vector, copy_of = json.loads(line)
        collected[id_] = (np.array(vector, np.float32), copy_of)
    return collected, [json.loads(line) for line in _lines(folder, "r")]


def _lines(folder, prefix: str) -> list[str]:
    return [
        line
        for path in sorted(glob.glob(f"{folder}/{prefix}-*"))
        for line in open(path, encoding="utf-8").read().splitlines()
    ]


def test_planted_copies_become_one_embedded_text_each(tmp_path):
    collected, rejected = _run(_records(), FakeEmbed(), tmp_path)
    head = _first_in_corpus()
    assert rejected == []
    assert set(collected) == set(head)  # every id has a vector: nothing lost
    representatives = {id_ for id_, (_, copy_of) in collected.items() if copy_of is None}
    assert representatives == set(head.values())
    assert len(representatives) == len(PLANTED)
    for id_, (vector, copy_of) in collected.items():
        if id_ != head[id_]:
            assert copy_of == head[id_]
            assert np.array_equal(vector, collected[head[id_]][0])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_representative_is_the_first_in_corpus_order_whatever_the_arrival(seed, tmp_path):
    collected, _ = _run(_records(order_seed=seed), FakeEmbed(), tmp_path)
    head = _first_in_corpus()
    assert {id_: copy_of or id_ for id_, (_, copy_of) in collected.items()} == head


def test_copies_of_a_rejected_text_are_rejected_with_it(tmp_path):
    records = [
        CorpusRecord("a", "please FAIL now", "f.txt:1"),
        CorpusRecord("b", "Please FAIL now!", "f.txt:2"),
        CorpusRecord("c", "fine", "f.txt:3"),
    ]
    collected, rejected = _run(records, FakeEmbed(), tmp_path)
    assert set(collected) == {"c"}
    reasons = {row["id"]: row["reason"] for row in rejected}
    assert set(reasons) == {"a", "b"}
    assert reasons["a"] == "inference failed: planted"
    assert reasons["b"].startswith("copy of the normalised text of a, which was rejected")
    assert reasons["b"].endswith("inference failed: planted")


def test_only_the_representatives_reach_the_model(tiny_st_dir, tmp_path):
    """With the real handler and writer: one model call per distinct text, copies stored with
    exactly their representative's vector and its id in copy_of."""
    records = _records()
    handler = SbertModelHandler(str(tiny_st_dir), min_batch_size=1, max_batch_size=64)
    dim = SbertModelHandler(str(tiny_st_dir)).load_model().dim
    schema = output_schema(dim, "float32", True, (), copy_of=True)
    embeddings = tmp_path / "embeddings"
    with BeamTestPipeline(runner="FnApiRunner", is_integration_test=False, blocking=True) as p:
        out = p | beam.Create(records) | EmbedDistinctTexts(Embed(handler))
        (
            out[EMBEDDED]
            | "ModelResults" >> beam.Filter(lambda r: isinstance(r.inference, Embedding))
            | "Ids" >> beam.Map(lambda r: r.example.id)
            | "WriteSeen" >> WriteToText(str(tmp_path / "seen"))
        )
        out[EMBEDDED] | WriteEmbeddings(
            str(embeddings), schema, dtype="float32", keep_text=True, keep_fields=(), copy_of=True
        )
        assert_that(out[REJECTED], equal_to([]), label="NoneRejected")
    head = _first_in_corpus()
    assert sorted(_lines(tmp_path, "seen")) == sorted(set(head.values()))
    parts = shard_paths(str(embeddings))
    table = pa.concat_tables([pq.read_table(path) for path in parts])
    assert table.schema == schema
    rows = {row["id"]: row for row in table.to_pylist()}
    assert set(rows) == set(head)
    for id_, row in rows.items():
        assert row[COPY_OF] == (None if head[id_] == id_ else head[id_])
        assert row["embedding"] == rows[head[id_]]["embedding"]
        assert row["text"] == next(r.text for r in records if r.id == id_)
    assert count_copies(parts) == len(head) - len(PLANTED)


def test_without_copy_of_the_schema_is_unchanged():
    plain = output_schema(8, "float32", True, ("lang",))
    assert plain == embeddings_schema(
        8, "float32", with_text=True, extra=[pa.field("lang", pa.string())]
    )
    assert COPY_OF not in plain.names
    with_column = output_schema(8, "float32", True, ("lang",), copy_of=True)
    assert with_column.names == [*plain.names, COPY_OF]
    assert with_column.field(COPY_OF).nullable
