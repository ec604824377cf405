"""The most common reasons of rejected rows, with their counts and the fix where it is plain."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
from sbert_pipeline.io.rejections import describe_reasons, reason_counts, reason_kind
from sbert_pipeline.io.schemas import ERRORS_SCHEMA


def test_details_that_vary_by_row_are_one_reason():
    assert reason_kind("duplicate id (first seen at a.jsonl:3)") == "duplicate id"
    assert reason_kind("duplicate id 'a3' (already embedded from /x/a.jsonl)") == "duplicate id"
    assert (
        reason_kind("record larger than the 100-byte limit (150 bytes)")
        == "record larger than the 100-byte limit"
    )
    assert reason_kind("missing field 'text'") == "missing field 'text'"


def test_the_top_reasons_with_counts_and_the_fix():
    counts = Counter({"missing field 'text'": 50, "empty text": 3, "malformed JSON: x": 2, "z": 1})
    line = describe_reasons(counts)
    assert line == (
        "most common reasons: missing field 'text' (50), empty text (3), malformed JSON: x (2), "
        "1 other(s); fix: --text-field names the field that holds the text"
    )
    assert describe_reasons(Counter()) == ""
    assert "fix:" not in describe_reasons(Counter({"empty text": 2}))


def test_reasons_are_counted_from_the_errors_folder(tmp_path):
    rows = [
        {
            "id": None,
            "source": f"f:{i}",
            "reason": f"duplicate id (first seen at f:{i - 1})",
            "excerpt": "",
        }
        for i in range(2, 6)
    ] + [{"id": "x", "source": "f:9", "reason": "empty text", "excerpt": ""}]
    pq.write_table(pa.Table.from_pylist(rows[:3], ERRORS_SCHEMA), tmp_path / "part-0-of-2.parquet")
    pq.write_table(pa.Table.from_pylist(rows[3:], ERRORS_SCHEMA), tmp_path / "part-1-of-2.parquet")
    assert reason_counts(str(tmp_path)) == Counter({"duplicate id": 4, "empty text": 1})
