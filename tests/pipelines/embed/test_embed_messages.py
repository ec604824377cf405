"""The embed stage's messages say what to do: a corpus without the text field is refused
before the model is read, a refused run names its most common reasons, and a run without
rejections points at no errors."""

from __future__ import annotations

import pytest
from sbert_pipeline.embed.file_records import run_facts
from sbert_pipeline.embed.stage import EmbedSummary
from sbert_pipeline.stage_api.stops import JobFailedError

from sbert_core.errors import DataFileError
from tests.stage_commands import embed


def test_a_corpus_without_the_text_field_is_refused_before_the_model(tmp_path):
    corpus = tmp_path / "questions.csv"
    corpus.write_text("qid,question\n1,how do i learn python\n2,what is beam\n")
    out = tmp_path / "out"
    # The model does not exist: the corpus is checked first, so its message is the one seen.
    argv = ["--input", str(corpus), "--output", str(out), "--model", str(tmp_path / "none")]
    with pytest.raises(
        DataFileError, match=r"\(fields: qid, question\); pass --text-field question"
    ):
        embed(argv)
    assert not out.exists()


def test_too_many_rejected_rows_name_the_reasons_and_the_fix(tmp_path, tiny_st_dir):
    corpus = tmp_path / "c.jsonl"
    big = "word " * 40
    corpus.write_text(
        '{"text": "a fine text"}\n' + "".join(f'{{"text": "{big}{i}"}}\n' for i in range(3))
    )
    argv = ["--input", str(corpus), "--output", str(tmp_path / "out"), "--model", str(tiny_st_dir)]
    with pytest.raises(JobFailedError) as info:
        embed([*argv, "--max-record-bytes", "100", "--max-error-rate", "0.5"])
    message = str(info.value)
    assert "3 of 4 rows rejected" in message
    assert "most common reasons: record larger than the 100-byte limit (3)" in message
    assert "fix: raise --max-record-bytes to keep longer rows" in message


def test_no_rejected_rows_point_at_no_errors():
    clean = EmbedSummary("out", read=5, embedded=5, rejected=0, truncated=0, seconds=1.0)
    assert "rejected in 1.0s" in clean.line() and "_errors" not in clean.line()
    some = EmbedSummary("out", read=5, embedded=4, rejected=1, truncated=0, seconds=1.0)
    assert "1 rejected (see out/_errors)" in some.line()


def test_an_incremental_run_reports_the_rows_it_embedded():
    manifest = {
        "counts": {"read": 772, "embedded": 770, "rejected": 2},
        "incremental": {"mode": "incremental", "rows_old": 600, "rows_new": 170},
    }
    assert run_facts(manifest) == {"read": 772, "embedded": 170, "reused": 600, "rejected": 2}
    full = {"counts": {"read": 3, "embedded": 3, "rejected": 0}, "incremental": {"mode": "full"}}
    assert run_facts(full) == {"read": 3, "embedded": 3, "rejected": 0}
