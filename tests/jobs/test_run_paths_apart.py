"""``sbert run`` keeps its folders apart from its inputs: a ``job_dir`` equal to, inside or above
anything the job reads (the corpus folder its glob lists, a model folder, dedup's labels ...) is
refused before anything is written, naming both paths; links are followed, URLs compared as
text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs.run import run
from jobs.run_paths import location, relation


def write_job(tmp_path: Path, job_dir: Path, corpus: str, model: Path, extra: str = "") -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(
        f"job_dir: {job_dir}\ninput: {{path: '{corpus}', id_field: id}}\nmodel: {model}\n"
        f"stages: [embed]\n{extra}",
        encoding="utf-8",
    )
    return config


@pytest.fixture
def corpus(tmp_path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"id": "a", "text": "some text"}) + "\n")
    return folder


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.mark.parametrize("where", ["corpus", "corpus/job", "link/job"])
def test_a_job_dir_in_the_folder_the_corpus_glob_lists_is_refused(
    tmp_path, corpus, tiny_st_dir, where
) -> None:
    (tmp_path / "link").symlink_to(corpus)
    config = write_job(tmp_path, tmp_path / where, f"{corpus}/*.jsonl", tiny_st_dir)
    before = files_under(tmp_path)
    how = "equal to" if where == "corpus" else "inside"
    with pytest.raises(ValueError, match=rf"^job_dir: {tmp_path / where} is {how} {corpus}/ "):
        run([str(config)])
    assert files_under(tmp_path) == before  # nothing written, not even job_dir


def test_a_model_folder_inside_the_job_dir_is_refused(tmp_path, corpus, tiny_st_dir) -> None:
    job_dir = tmp_path / "job"
    model = job_dir / "embeddings" / "model"  # a stage folder the job replaces
    shutil.copytree(tiny_st_dir, model)
    config = write_job(tmp_path, job_dir, f"{corpus}/*.jsonl", model)
    before = files_under(tmp_path)
    with pytest.raises(ValueError, match=rf"^job_dir: {job_dir} is above {model} \(model\)"):
        run([str(config)])
    assert files_under(tmp_path) == before


def test_dedup_labels_inside_the_job_dir_are_refused(tmp_path, corpus, tiny_st_dir) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "_job_state.json").write_text(json.dumps({"format": 1, "stages": {}}))
    labels = job_dir / "labels.csv"
    labels.write_text("id_a,id_b,label\na,a,1\n")
    config = write_job(tmp_path, job_dir, f"{corpus}/*.jsonl", tiny_st_dir)
    text = config.read_text().replace("stages: [embed]", "stages: [embed, pairs, dedup]")
    config.write_text(text + f"dedup: {{labels: {labels}}}\n")
    with pytest.raises(ValueError, match=rf"is above {labels} \(dedup.labels\)"):
        run([str(config)])
    assert files_under(job_dir) == ["_job_state.json", "labels.csv"]


def test_urls_are_compared_by_their_normalised_text() -> None:
    assert location("GS://bucket//corpus/./day1/") == "gs://bucket/corpus/day1"
    assert relation("gs://bucket/corpus/job", "gs://bucket//corpus/") == "inside"
    assert relation("s3://bucket/jobs", "s3://bucket/jobs/one/model") == "above"
    assert relation("gs://bucket/corpus", "gs://bucket/corpus/") == "equal to"
    assert relation("gs://bucket/corpus2", "gs://bucket/corpus") is None
    assert relation("gs://bucket/corpus", "/bucket/corpus") is None
