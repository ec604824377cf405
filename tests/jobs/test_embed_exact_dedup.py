"""``sbert embed --exact-dedup`` end to end: counts, copy_of, vectors, the run key, and dedup."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.embed.sinks import output_schema
from sbert_pipeline.grouping.choices import METHODS
from sbert_pipeline.io.record_limits import COPY_OF
from sbert_pipeline.jobs.run_config import load_run_config
from sbert_pipeline.jobs.run_inputs import check_job_inputs
from sbert_pipeline.jobs.run_stages import plan_stages

from tests.stage_commands import dedup, embed, pairs

# (id, text) in corpus order; each id's representative is the first row of its text.
CORPUS = [
    ("a1", "What is fine-tuning?"),
    ("b1", "How do I learn Python?"),
    ("a2", "what is FINE   tuning!!"),
    ("c", "Is C# hard?"),
    ("d", "Is C hard?"),
    ("a3", "Ｗhat is ﬁne-tuning"),
    ("b2", "how do I learn python"),
    ("e1", "Straße"),
    ("e2", "STRASSE."),
]
HEAD = {"a1": "a1", "a2": "a1", "a3": "a1", "b1": "b1", "b2": "b1", "c": "c", "d": "d"}
HEAD |= {"e1": "e1", "e2": "e1"}
COPIES = sum(1 for id_, head in HEAD.items() if id_ != head)


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [json.dumps({"id": id_, "text": text}) for id_, text in CORPUS]
    lines.insert(4, '{"id": "bad", "text": ')  # malformed: rejected when read
    (folder / "questions.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(folder / "*.jsonl")


def _embed(corpus, out, model, local_pipeline, *extra):
    argv = ["--input", corpus, "--output", str(out), "--model", str(model), "--id-field", "id"]
    return embed([*argv, "--keep-text", *extra], test_pipeline=local_pipeline)


def test_each_normalised_text_is_embedded_once(
    corpus, tmp_path, tiny_st_dir, local_pipeline, read_output
):
    _embed(corpus, tmp_path / "emb", tiny_st_dir, local_pipeline, "--exact-dedup")
    output = read_output(tmp_path / "emb")
    counts = output.manifest["counts"]
    assert counts["read"] == len(CORPUS) + 1 and counts["rejected"] == 1
    assert counts["embedded"] == len(CORPUS)  # every id has a vector
    assert counts["copies"] == COPIES == 4
    assert counts["distinct_texts"] == len(set(HEAD.values())) == 5
    assert counts["read"] == counts["distinct_texts"] + counts["copies"] + counts["rejected"]
    assert output.table.schema.names[-1] == COPY_OF
    rows = {row["id"]: row for row in output.table.to_pylist()}
    assert set(rows) == set(HEAD)
    for id_, head in HEAD.items():
        assert rows[id_][COPY_OF] == (None if id_ == head else head)
        assert rows[id_]["embedding"] == rows[head]["embedding"]  # exactly, not close
        assert rows[id_]["text"] == dict(CORPUS)[id_]


def test_without_the_flag_schema_and_counts_are_unchanged(
    corpus, tmp_path, tiny_st_dir, local_pipeline, read_output
):
    _embed(corpus, tmp_path / "plain", tiny_st_dir, local_pipeline)
    plain = read_output(tmp_path / "plain")
    dim = plain.manifest["dim"]
    assert plain.table.schema == output_schema(dim, "float32", True, ())
    assert "copies" not in plain.manifest["counts"]
    assert "distinct_texts" not in plain.manifest["counts"]
    assert plain.manifest["counts"]["embedded"] == len(CORPUS)
    vectors = plain.vectors_by_id()
    # Each row embedded for itself: copies differ from their representative's vector.
    assert not np.array_equal(vectors["a2"], vectors["a1"])


def test_the_run_key_is_the_flag(tmp_path, tiny_st_dir):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "text": "one"}\n', encoding="utf-8")
    for value, expected in ((True, True), (False, False)):
        config_path = tmp_path / f"job_{value}.yaml"
        config_path.write_text(
            f"job_dir: {tmp_path / 'job'}\ninput: {{path: {corpus}, id_field: id}}\n"
            f"model: {tiny_st_dir}\nstages: [embed]\n"
            f"embed: {{exact_dedup: {str(value).lower()}}}\n",
            encoding="utf-8",
        )
        config = load_run_config(config_path)
        (plan,) = plan_stages(config, check_job_inputs(config), [])
        assert plan.options.exact_dedup is expected


@pytest.fixture
def exact_embeddings(corpus, tmp_path, tiny_st_dir, local_pipeline):
    _embed(corpus, tmp_path / "emb", tiny_st_dir, local_pipeline, "--exact-dedup")
    argv = ["--embeddings", str(tmp_path / "emb"), "--output", str(tmp_path / "pairs")]
    pairs([*argv, "--k", "4", "--threshold", "0.99", "--method", "exact"])
    return tmp_path


@pytest.mark.parametrize("method", METHODS)
def test_dedup_puts_the_copies_in_their_representatives_group(exact_embeddings, method):
    root = exact_embeddings
    out = root / f"dedup_{method}"
    argv = ["--pairs", str(root / "pairs"), "--output", str(out), "--threshold", "1.0"]
    summary = dedup([*argv, "--method", method])
    assert summary.rows_in == len(CORPUS) == summary.kept + summary.removed
    assert summary.copies == COPIES
    rows = {row["id"]: row for row in pq.read_table(out / "groups.parquet").to_pylist()}
    for id_, head in HEAD.items():
        if id_ != head:
            assert rows[id_]["group"] == rows[head]["group"]
            assert rows[id_]["reason"] == "same normalised text"
            assert not rows[id_]["is_representative"]
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["exact_copies"] == {
        "copies": COPIES,
        "texts": 3,
        "reason": "same normalised text",
    }
    assert "copies" in summary.line()
