"""Every Parquet output folder opens as one dataset in the readers people use (issue 16 item 1).

One ``sbert run`` (embed, index, cluster, pairs, dedup) on a tiny random BERT and a corpus with
rejected rows, so the embed stage's dead-letter folder is not empty. Each output folder is then
read with no custom code: pandas ``read_parquet(dir)``, ``pyarrow.dataset.dataset(dir)``, polars
``read_parquet('dir/*.parquet')`` and DuckDB ``read_parquet('dir/*.parquet')``, and must give
the stage's own columns and rows, never the dead letters. Every stored cosine is in [-1, 1].

polars reads the glob, not the bare folder: its folder mode reads every file below the folder,
``_`` names and subfolders included, and refuses a folder holding a non-Parquet file such as
``_manifest.json`` (see docs/architecture.md, "Reading the folders with other tools").
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from sbert_pipeline.embed.read_corpus import READ_LEDGER
from sbert_pipeline.index import sharded
from sbert_pipeline.io.output_dir import ATTEMPTS, MANIFEST, PREVIOUS, STARTED
from sbert_pipeline.io.schemas import ERRORS_DIR, ERRORS_SCHEMA
from sbert_pipeline.jobs.run import run
from sbert_pipeline.pairs import transforms as pairs_transforms

_WORDS = "man woman dog cat guitar music road rain sky sun house tree car food question".split()
GOOD = 36
COPIES = 8  # rows whose text repeats an earlier row's: their pairs are the same vector twice
BAD_ROWS = [
    '{"id": "broken", "text": "no closing brace"',  # not JSON
    '{"id": "empty", "text": ""}',  # empty text
    '{"id": "missing", "lang": "en"}',  # no text field
    '{"id": "g000", "text": "a second row with a seen id", "lang": "en"}',  # duplicate id
    '["not", "an", "object"]',
]
EMBEDDED = GOOD + COPIES

# The folders and what a dataset reader must find there: columns, in order.
FOLDERS = {
    "embeddings": ["id", "embedding", "n_tokens", "truncated", "text", "lang"],
    "clusters/assignments": ["id", "cluster", "score"],
    "pairs/neighbors": ["id", "neighbor_ids", "scores"],
    "pairs/pairs": ["id_a", "id_b", "score"],
}
GROUPS_COLUMNS = ["id", "group", "is_representative", "size", "score"]


def corpus_lines() -> list[str]:
    rng = np.random.default_rng(3)
    texts = [
        " ".join(rng.choice(_WORDS, size=int(rng.integers(3, 9)))) + f" {n}" for n in range(GOOD)
    ]
    rows = [{"id": f"g{n:03d}", "text": text, "lang": "en"} for n, text in enumerate(texts)]
    rows += [{"id": f"copy{n}", "text": texts[n], "lang": "en"} for n in range(COPIES)]
    lines = [json.dumps(row) for row in rows]
    return lines[:10] + BAD_ROWS + lines[10:]


@pytest.fixture(scope="module")
def job(tmp_path_factory, tiny_st_dir) -> Path:
    """One ``sbert run`` of every stage; returns the job folder."""
    root = tmp_path_factory.mktemp("readers")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(line + "\n" for line in corpus_lines()), encoding="utf-8")
    config = {
        "job_dir": str(root / "job"),
        "input": {
            "path": str(corpus),
            "id_field": "id",
            "keep_fields": ["lang"],
            "keep_text": True,
        },
        "model": str(tiny_st_dir),
        "stages": ["embed", "index", "cluster", "pairs", "dedup"],
        "index": {"queries": 20},
        "cluster": {"k": 3},
        "pairs": {"k": 5, "threshold": 0.9, "method": "exact"},
        "dedup": {"threshold": 0.99},
    }
    path = root / "job.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    run([str(path)])
    return root / "job"


def manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def expected_rows(job: Path) -> dict[str, int]:
    pairs = sum(entry["rows"] for entry in manifest(job / "pairs")["commit"]["files"]
                if entry["path"].startswith("pairs/"))  # fmt: skip
    return {
        "embeddings": EMBEDDED,
        "clusters/assignments": EMBEDDED,
        "pairs/neighbors": EMBEDDED,
        "pairs/pairs": pairs,
    }


def test_the_dead_letter_folder_holds_every_rejected_row(job):
    counts = manifest(job / "embeddings")["counts"]
    assert (counts["read"], counts["embedded"], counts["rejected"]) == (
        EMBEDDED + len(BAD_ROWS),
        EMBEDDED,
        len(BAD_ROWS),
    )
    letters = pq.read_table(sorted((job / "embeddings" / ERRORS_DIR).glob("part-*.parquet")))
    assert letters.schema.names == ERRORS_SCHEMA.names and letters.num_rows == len(BAD_ROWS)
    assert manifest(job / "pairs")["counts"]["pairs"] >= COPIES  # the repeated texts


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_pandas_reads_the_folder(job, folder):
    table = pd.read_parquet(job / folder)
    assert list(table.columns) == FOLDERS[folder]
    assert len(table) == expected_rows(job)[folder]


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_pyarrow_dataset_reads_the_folder(job, folder):
    table = ds.dataset(job / folder, format="parquet").to_table()
    assert table.column_names == FOLDERS[folder]
    assert table.num_rows == expected_rows(job)[folder]


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_polars_reads_the_folders_parts(job, folder):
    frame = pl.read_parquet(f"{job / folder}/*.parquet")
    assert frame.columns == FOLDERS[folder]
    assert frame.height == expected_rows(job)[folder]


@pytest.mark.parametrize("folder", sorted(FOLDERS))
def test_duckdb_reads_the_folders_parts(job, folder):
    relation = duckdb.sql(f"SELECT * FROM read_parquet('{job / folder}/*.parquet')")
    assert relation.columns == FOLDERS[folder]
    assert relation.shape[0] == expected_rows(job)[folder]


def test_every_reader_opens_the_single_file_outputs(job):
    groups = job / "dedup" / "groups.parquet"
    grouped = manifest(job / "dedup")["counts"]["grouped"]
    assert list(pd.read_parquet(groups).columns) == GROUPS_COLUMNS
    assert len(pd.read_parquet(groups)) == grouped
    assert ds.dataset(groups, format="parquet").to_table().num_rows == grouped
    assert pl.read_parquet(groups).columns == GROUPS_COLUMNS
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{groups}')").fetchall() == [(grouped,)]
    assert len(pd.read_parquet(job / "index" / "ids.parquet")) == EMBEDDED


def test_nothing_but_parts_is_visible_in_a_parquet_folder(job):
    """Inside every dataset folder, whatever is not a part sits under a ``_`` or ``.`` name."""
    for folder in FOLDERS:
        for path in (job / folder).rglob("*"):
            relative = path.relative_to(job / folder)
            if path.is_file() and len(relative.parts) == 1:
                visible = fnmatch.fnmatch(relative.name, "part-*.parquet")
            else:
                visible = False
            assert visible or relative.parts[0].startswith(("_", ".")), job / folder / relative


def test_every_name_a_stage_writes_beside_its_parts_is_hidden():
    """Markers, attempt areas, ledgers, work areas and dead letters: names readers skip."""
    names = [
        MANIFEST,
        STARTED,
        ATTEMPTS,
        PREVIOUS,
        ERRORS_DIR,
        READ_LEDGER,
        sharded.WORK_DIR,
        pairs_transforms.WORK_DIR,
    ]
    assert [name for name in names if not name.startswith(("_", "."))] == []


def test_every_stored_cosine_is_inside_minus_one_one(job):
    """Scores as every reader sees them: pairs, neighbours, assignments, groups, summaries."""
    pairs = ds.dataset(job / "pairs" / "pairs", format="parquet").to_table()
    neighbors = ds.dataset(job / "pairs" / "neighbors", format="parquet").to_table()
    assigned = ds.dataset(job / "clusters" / "assignments", format="parquet").to_table()
    groups = pq.read_table(job / "dedup" / "groups.parquet")
    summary = pq.read_table(job / "clusters" / "summary.parquet")
    columns = {
        "pairs": pairs.column("score").to_numpy(),
        "neighbors": np.concatenate(neighbors.column("scores").to_pylist()),
        "assignments": assigned.column("score").to_numpy(),
        "groups": groups.column("score").drop_null().to_numpy(),
        "summary mean": summary.column("mean_score").to_numpy(),
        "summary representatives": np.concatenate(
            summary.column("representative_scores").to_pylist()
        ),
    }
    outside = {
        name: float(np.abs(values).max())
        for name, values in columns.items()
        if len(values) and np.abs(values).max() > 1
    }
    assert outside == {}
    (duck,) = duckdb.sql(
        f"SELECT max(score), min(score) FROM read_parquet('{job / 'pairs' / 'pairs'}/*.parquet')"
    ).fetchall()
    assert -1 <= duck[1] <= duck[0] <= 1
    copies = {(f"copy{n}", f"g{n:03d}") for n in range(COPIES)}
    found = {
        (a, b): s
        for a, b, s in zip(
            pairs.column("id_a").to_pylist(),
            pairs.column("id_b").to_pylist(),
            pairs.column("score").to_pylist(),
            strict=True,
        )
    }
    assert copies <= set(found) and max(found[pair] for pair in copies) == pytest.approx(1.0)
