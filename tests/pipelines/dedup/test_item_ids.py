"""Ids held as one Arrow array (pipelines/dedup/item_ids.py) and the Arrow paths that replaced
Python strings: derived-id ranks, id lists read back, a previous version's changes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from sbert_pipeline.dedup.sources import embedding_ids
from sbert_pipeline.dedup.versions import read_id_array, read_id_list, write_id_list
from sbert_pipeline.grouping import item_ids
from sbert_pipeline.grouping.item_ids import ItemIds
from sbert_pipeline.grouping.ranking import derived_id_ranks, inverse_order
from sbert_pipeline.io.embeddings import EmbeddingsDataset

from tests.jobs.test_dedup_job import write_embeddings


def test_item_ids_behave_as_a_sequence_of_strings(monkeypatch):
    monkeypatch.setattr(item_ids, "CHUNK_ROWS", 3)  # iteration crosses chunk boundaries
    values = [f"id-{i}" for i in range(10)]
    ids = ItemIds(pa.chunked_array([values[:4], values[4:]]))
    assert len(ids) == 10 and ids[7] == "id-7" and ids[np.int64(2)] == "id-2"
    assert list(ids) == values
    assert ids[2:5] == values[2:5]
    assert ids.take(np.array([9, 0, 9])) == ["id-9", "id-0", "id-9"]
    rows = np.array([8, 1, 5, 0, 3, 2, 7])
    assert list(ids.iter_rows(rows)) == [values[r] for r in rows]
    assert "id-3" in ids and "nope" not in ids


def test_rows_of_finds_rows_and_marks_strangers():
    ids = ItemIds(pa.array(["b", "a", "c"]))
    assert ids.rows_of(["c", "x", "b"]).tolist() == [2, -1, 0]
    assert ids.rows_of(pa.array(["a"])).tolist() == [1]
    assert ids.rows_of([]).tolist() == []
    assert ids.index() == {"b": 0, "a": 1, "c": 2}


def test_of_takes_plain_lists_arrow_arrays_and_item_ids():
    plain = ItemIds.of(["x", "y", "z"])
    assert plain.take(np.array([2, 0])) == ["z", "x"]
    assert list(plain.iter_rows(np.array([1, 1]))) == ["y", "y"]
    assert ItemIds.of(plain) is plain
    coded = ItemIds.of(pa.array(["x", "y", "x"]).dictionary_encode())
    assert coded.array.type == pa.string() and list(coded) == ["x", "y", "x"]
    assert ItemIds.of(pa.array(["a"], pa.large_string())).array.type == pa.string()


def _derived_reference(ids: list[str]) -> list[int] | None:
    """The Python definition the Arrow version replaced: file name, then row number."""
    keys = []
    for item in ids:
        name, sep, row = item.rpartition(":")
        if not sep or not row or not all("0" <= c <= "9" for c in row):
            return None
        keys.append((name, int(row)))
    order = sorted(range(len(ids)), key=lambda i: keys[i])
    return inverse_order(np.array(order, np.int64)).tolist()


def test_derived_id_ranks_match_the_python_definition():
    rng = np.random.default_rng(0)
    files = ["b.txt", "a.txt", "dir:with:colons/c.txt", "é.jsonl", "a.txt0", "A.txt", ""]
    ids = [
        f"{files[f]}:{r}"
        for f, r in zip(rng.integers(0, 7, 500), rng.permutation(500), strict=True)
    ]
    assert derived_id_ranks(ids).tolist() == _derived_reference(ids)
    assert derived_id_ranks(pa.array(ids)).tolist() == _derived_reference(ids)
    for bad in (["a.txt:1", "a.txt:"], ["a.txt:1", "no colon"], ["a:1x"], ["a:²"], ["a:-1"]):
        assert derived_id_ranks(bad) is None, bad
    assert derived_id_ranks(["a:" + "9" * 30]) is None  # not a row number an int64 holds
    assert derived_id_ranks(["line\nbreak:2", "line\nbreak:10"]).tolist() == [0, 1]
    assert derived_id_ranks([]).tolist() == []


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["one"],
        ["a", "b", ""],
        ["plain", "with\nnewline", "back\\slash", "cr\r", "\\n literal", "", "é 🙂", "a\tb"],
    ],
)
def test_id_arrays_read_back_what_was_written(tmp_path, values):
    path = str(tmp_path / "ids.txt")
    assert write_id_list(path, values) == len(values)
    array = read_id_array(path)
    assert array.type == pa.string()
    assert array.to_pylist() == values == read_id_list(path)


def test_a_bad_escape_in_an_id_list_is_refused(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_text("ok\nbad\\q\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad escape"):
        read_id_array(str(path))


def test_repeated_embedding_ids_are_refused_naming_one(tmp_path):
    unique = write_embeddings(tmp_path / "ok", ["c", "a", "b", "d"])
    assert embedding_ids(EmbeddingsDataset.open_many([str(unique)])).to_pylist() == [
        "c",
        "a",
        "b",
        "d",
    ]
    repeated = write_embeddings(tmp_path / "twice", ["z", "b", "a", "b", "z", "b"])
    with pytest.raises(ValueError, match=r"2 ids occur more than once .*first: 'b'"):
        embedding_ids(EmbeddingsDataset.open_many([str(repeated)]))
