"""``sbert run``'s job-wide ``memory_budget:``, each stage's peak RSS in the job state and the
table, and a job that starts from vectors made before it (``embeddings:``, no embed stage).

The vectors are planted (a background and near-duplicate twins, ids not in row order) so that
the job's pairs can be compared with ``sbert pairs`` run directly on the same vectors.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from planted_vectors import write_embeddings
from sbert_pipeline import pairs
from sbert_pipeline.io.pairs_output import read_pairs
from sbert_pipeline.jobs.run import main as run_main
from sbert_pipeline.jobs.run import run
from sbert_pipeline.jobs.run_config import all_stage_options, load_run_config, stage_options
from sbert_pipeline.jobs.run_inputs import check_job_inputs
from sbert_pipeline.jobs.run_stages import StageResult, plan_stages
from sbert_pipeline.stage_api.stage_records import JobState

N, DIM, TWINS, THRESHOLD = 240, 16, 24, 0.9
STAGES = ["index", "cluster", "pairs", "dedup"]


def planted() -> tuple[list[str], np.ndarray]:
    """240 rows of dim 16: a random background and 24 near-duplicate twins."""
    rng = np.random.default_rng(29)
    background = rng.standard_normal((N - TWINS, DIM))
    bases = rng.choice(N - TWINS, TWINS, replace=False)
    twins = background[bases] + 0.05 * rng.standard_normal((TWINS, DIM))
    vectors = np.concatenate([background, twins]).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [f"doc-{j:04d}" for j in rng.permutation(N)], vectors


@pytest.fixture(scope="module")
def vectors() -> tuple[list[str], np.ndarray]:
    return planted()


def write_job(tmp_path: Path, extra: dict, name: str = "job.yaml") -> Path:
    config = {
        "job_dir": str(tmp_path / "job"),
        "stages": STAGES,
        "cluster": {"k": 3},
        "pairs": {"method": "exact", "k": 5, "threshold": THRESHOLD},
        "dedup": {"threshold": THRESHOLD},
        **extra,
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def pair_set(folder: Path) -> set[tuple[str, str, float]]:
    table = read_pairs(str(folder))
    columns = [table.column(c).to_pylist() for c in ("id_a", "id_b", "score")]
    return set(zip(*columns, strict=True))


def write_dataset(folder: Path, ids: list[str], vectors: np.ndarray) -> Path:
    """A Parquet dataset sbert embed did not make: columns ``doc_id`` and ``vec``, two files."""
    folder.mkdir()
    for number, rows in enumerate((slice(0, N // 2), slice(N // 2, N))):
        flat = pa.array(vectors[rows].reshape(-1), pa.float32())
        table = pa.table(
            {
                "doc_id": pa.array(ids[rows], pa.string()),
                "vec": pa.FixedSizeListArray.from_arrays(flat, DIM),
            }
        )
        pq.write_table(table, folder / f"chunk-{number}.parquet")
    return folder


# --- memory_budget: ----------------------------------------------------------------------------


def budget_fields(options) -> bool:
    return "memory_budget" in {item.name for item in dataclasses.fields(options)}


def test_job_budget_reaches_every_stage_with_the_option_unless_its_section_sets_one(
    tmp_path, vectors
) -> None:
    write_embeddings(tmp_path / "emb", *vectors)
    path = write_job(
        tmp_path,
        {"embeddings": str(tmp_path / "emb"), "memory_budget": "1GB", "index": {}},
    )
    config = load_run_config(path)
    shown = all_stage_options(config)
    with_option = [name for name, options in shown.items() if budget_fields(options)]
    assert "index" in with_option  # the stage that already had the option
    for name in with_option:
        assert shown[name].memory_budget == "1GB", name
    own = load_run_config(path, ["index.memory_budget=512MiB"])
    assert stage_options(own, "index").memory_budget == "512MiB"
    for name in with_option:
        if name != "index":
            assert stage_options(own, name).memory_budget == "1GB", name


@pytest.mark.parametrize(
    ("value", "message"),
    [("lots", r"memory_budget: .*lots"), ("900TB", r"memory_budget: 900TB is more than")],
)
def test_bad_budget_is_refused_naming_the_key_before_the_job_dir_exists(
    tmp_path, vectors, value, message
) -> None:
    write_embeddings(tmp_path / "emb", *vectors)
    path = write_job(tmp_path, {"embeddings": str(tmp_path / "emb"), "memory_budget": value})
    with pytest.raises(ValueError, match=message):
        run([str(path)])
    assert not (tmp_path / "job").exists()


def test_print_config_shows_the_budget_and_the_embeddings(tmp_path, vectors, capsys) -> None:
    write_embeddings(tmp_path / "emb", *vectors)
    path = write_job(tmp_path, {"embeddings": str(tmp_path / "emb"), "memory_budget": "2GB"})
    assert run_main([str(path), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["memory_budget"] == "2GB"
    assert printed["embeddings"]["path"] == str(tmp_path / "emb")
    assert printed["index"]["memory_budget"] == "2GB"
    # What it prints is a config of the same job.
    again = tmp_path / "printed.yaml"
    again.write_text(yaml.safe_dump(printed), encoding="utf-8")
    assert load_run_config(again).embeddings == load_run_config(path).embeddings


# --- embeddings: -------------------------------------------------------------------------------


def test_job_from_an_embed_folder_runs_each_stage_and_records_peak_rss(
    tmp_path, vectors, capsys
) -> None:
    emb = write_embeddings(tmp_path / "emb", *vectors)
    path = write_job(tmp_path, {"embeddings": str(emb)})
    summary = run([str(path)])
    assert {stage.name: stage.status for stage in summary.stages} == dict.fromkeys(STAGES, "ran")
    job = tmp_path / "job"
    assert not (job / "embeddings").exists()  # nothing embedded, nothing copied
    # The job's pairs are sbert pairs' on the same folder.
    direct = tmp_path / "direct"
    pairs.run(
        pairs.Options(
            embeddings=(str(emb),), output=str(direct), k=5, threshold=THRESHOLD, method="exact"
        )
    )
    found = pair_set(job / "pairs")
    assert len(found) >= TWINS and found == pair_set(direct)
    dedup = json.loads((job / "dedup" / "_manifest.json").read_text())
    assert dedup["counts"]["removed"] >= TWINS
    # Every stage's peak RSS: the process's at its end, never below its start (monotonic).
    state = json.loads((job / "_job_state.json").read_text())["stages"]
    for name in STAGES:
        record = state[name]
        assert record["peak_rss"] >= record["peak_rss_at_start"] > 0, name
    table = summary.table()
    assert "peak RSS" in table.splitlines()[0]
    assert "GiB" in table or "MiB" in table
    assert "peak RSS" in (job / "report.html").read_text()

    # Unchanged vectors: every stage skipped, with its recorded peak shown.
    again = run([str(path)])
    assert {s.name: s.status for s in again.stages} == dict.fromkeys(STAGES, "skipped")
    assert again.stages[0].peak_rss == state["index"]["peak_rss"]
    # New vectors in the folder (a new manifest): every stage runs again.
    (emb / "_manifest.json").unlink()
    for part in emb.glob("*.parquet"):
        part.unlink()
    emb.rmdir()
    ids, values = vectors
    write_embeddings(emb, ids, values[::-1].copy())
    third = run([str(path)])
    assert {s.name: s.status for s in third.stages} == dict.fromkeys(STAGES, "ran")


def test_job_from_a_parquet_dataset_matches_sbert_pairs_on_it(tmp_path, vectors) -> None:
    ids, values = vectors
    data = write_dataset(tmp_path / "vectors", ids, values)
    columns = {"embedding_column": "vec", "id_column": "doc_id"}
    path = write_job(
        tmp_path, {"embeddings": {"path": str(data), **columns}, "stages": ["pairs", "dedup"]}
    )
    summary = run([str(path)])
    assert [s.status for s in summary.stages] == ["ran", "ran"]
    direct = tmp_path / "direct"
    pairs.run(
        pairs.Options(
            embeddings=(str(data),),
            output=str(direct),
            k=5,
            threshold=THRESHOLD,
            method="exact",
            **columns,
        )
    )
    found = pair_set(tmp_path / "job" / "pairs")
    assert len(found) >= TWINS and found == pair_set(direct)
    # Files are known by their content: a new modification time alone changes nothing ...
    first = data / "chunk-0.parquet"
    stat = first.stat()
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**10))
    touched = run([str(path)])
    assert [s.status for s in touched.stages] == ["skipped", "skipped"]
    # ... and a file rewritten (its time kept) runs the stages again.
    table = pq.read_table(first)
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), first)
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**10))
    again = run([str(path)])
    assert [s.status for s in again.stages] == ["ran", "ran"]


def test_fingerprint_follows_the_embed_folders_manifest(tmp_path, vectors) -> None:
    emb = write_embeddings(tmp_path / "emb", *vectors)
    path = write_job(tmp_path, {"embeddings": str(emb)})
    config = load_run_config(path)

    def fingerprints() -> dict[str, str]:
        plans = plan_stages(config, check_job_inputs(config), [])
        return {plan.name: plan.fingerprint({}) for plan in plans if not plan.upstream}

    before = fingerprints()
    assert set(before) == {"index", "cluster", "pairs"}  # the stages that read the vectors
    manifest = json.loads((emb / "_manifest.json").read_text())
    (emb / "_manifest.json").write_text(json.dumps({**manifest, "model_id": "other"}))
    after = fingerprints()
    assert all(after[name] != before[name] for name in before)


@pytest.mark.parametrize(
    ("extra", "error", "message"),
    [
        (
            {"stages": ["embed", "index"], "input": {"path": "corpus.jsonl"}},
            ValueError,
            r"embeddings: the stages read the embed stage's output",
        ),
        (
            {"embeddings": {"path": "EMB", "id_column": "doc_id"}},
            ValueError,
            r"embeddings.id_column: applies to a Parquet dataset",
        ),
        (
            {"embeddings": {"path": "EMB", "embedding_column": "vec"}},
            ValueError,
            r"embeddings.id_column: required",
        ),
        (
            {"embeddings": {"embedding_column": "vec", "id_column": "doc_id"}},
            ValueError,
            r"embeddings.embedding_column: set embeddings.path",
        ),
    ],
)
def test_config_refusals_name_the_key(tmp_path, vectors, extra, error, message) -> None:
    emb = write_embeddings(tmp_path / "emb", *vectors)
    values = {"embeddings": str(emb), **extra}
    if isinstance(values["embeddings"], dict) and values["embeddings"].get("path") == "EMB":
        values["embeddings"]["path"] = str(emb)
    path = write_job(tmp_path, values)
    with pytest.raises(error, match=message):
        run([str(path)])
    assert not (tmp_path / "job").exists()


def test_neither_embed_nor_embeddings_is_refused(tmp_path) -> None:
    path = write_job(tmp_path, {})
    with pytest.raises(ValueError, match=r"stages: index reads the output of embed.*embeddings:"):
        run([str(path)])


def test_a_folder_without_manifest_needs_its_columns_named(tmp_path, vectors) -> None:
    data = write_dataset(tmp_path / "vectors", *vectors)
    path = write_job(tmp_path, {"embeddings": str(data)})
    with pytest.raises(FileNotFoundError, match=r"embeddings.path: .* has no _manifest.json"):
        run([str(path)])
    missing = write_job(tmp_path, {"embeddings": str(tmp_path / "nowhere")}, "missing.yaml")
    with pytest.raises(FileNotFoundError, match=r"embeddings.path: .*nowhere"):
        run([str(missing)])
    assert not (tmp_path / "job").exists()


def test_a_state_written_before_peak_rss_was_recorded_still_loads(tmp_path) -> None:
    (tmp_path / "_job_state.json").write_text(
        json.dumps(
            {
                "format": 1,
                "stages": {
                    "index": {
                        "fingerprint": "f",
                        "output_identity": "i",
                        "seconds": 1.5,
                        "finished": "2026-01-01T00:00:00Z",
                    }
                },
            }
        )
    )
    record = JobState.load(str(tmp_path)).stages["index"]
    assert record.peak_rss is None and record.peak_rss_at_start is None
    assert StageResult("index", "skipped", "out").peak_rss_text() == "-"
    shared = StageResult("dedup", "ran", "out", peak_rss=2 << 30, peak_rss_at_start=2 << 30)
    assert shared.peak_rss_text() == "<= 2.00 GiB"  # an earlier stage had reached it
    raised = StageResult("pairs", "ran", "out", peak_rss=3 << 30, peak_rss_at_start=2 << 30)
    assert raised.peak_rss_text() == "3.00 GiB"
