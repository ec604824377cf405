"""``sbert run`` keeps its folders apart from its inputs: a ``job_dir`` equal to, inside or above
anything the job reads (the corpus files its glob can match, a model folder, dedup's labels ...)
is refused before anything is written, naming both paths; links are followed, URLs compared by
name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sbert_pipeline.jobs.run import run
from sbert_pipeline.jobs.run_paths import refuse_job_dir_overlaps


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


@pytest.mark.parametrize(
    ("where", "glob", "how"),
    [
        ("corpus", "corpus/*.jsonl", "holds"),
        ("link", "corpus/*.jsonl", r"\(that is .*/corpus\) holds"),  # a link to the corpus
        ("corpus", "corpus/a.jsonl", "holds"),
    ],
)
def test_a_job_dir_where_the_corpus_glob_reaches_is_refused(
    tmp_path, corpus, tiny_st_dir, where, glob, how
) -> None:
    (tmp_path / "link").symlink_to(corpus)
    config = write_job(tmp_path, tmp_path / where, str(tmp_path / glob), tiny_st_dir)
    before = files_under(tmp_path)
    with pytest.raises(ValueError, match=rf"^job_dir: {tmp_path / where} {how} input.path "):
        run([str(config)])
    assert files_under(tmp_path) == before  # nothing written, not even job_dir


def test_a_job_dir_beside_the_corpus_files_its_glob_cannot_match_runs(
    tmp_path, corpus, tiny_st_dir
) -> None:
    config = write_job(tmp_path, corpus / "job", f"{corpus}/*.jsonl", tiny_st_dir)
    assert [stage.status for stage in run([str(config)]).stages] == ["ran"]


def test_a_model_folder_inside_the_job_dir_is_refused(tmp_path, corpus, tiny_st_dir) -> None:
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "_job_state.json").write_text(json.dumps({"format": 1, "stages": {}}))
    model = job_dir / "index" / "model"  # in a stage folder a later stage replaces
    shutil.copytree(tiny_st_dir, model)
    config = write_job(tmp_path, job_dir, f"{corpus}/*.jsonl", model)
    config.write_text(config.read_text().replace("stages: [embed]", "stages: [embed, index]"))
    before = files_under(tmp_path)
    with pytest.raises(ValueError, match=rf"^job_dir: {job_dir} holds model {model}:"):
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
    with pytest.raises(ValueError, match=rf"^job_dir: {job_dir} holds dedup.labels {labels}:"):
        run([str(config)])
    assert files_under(job_dir) == ["_job_state.json", "labels.csv"]


def test_urls_are_compared_by_name() -> None:
    inputs = [("input.path", "gs://bucket//corpus/*.jsonl"), ("model", "s3://models/m")]
    refuse_job_dir_overlaps("gs://bucket/jobs/one", inputs)  # apart
    with pytest.raises(ValueError, match=r"^job_dir: gs://bucket/ holds input.path gs://"):
        refuse_job_dir_overlaps("gs://bucket/", inputs)
    with pytest.raises(ValueError, match=r"^job_dir: S3://models/m/job is inside model s3://"):
        refuse_job_dir_overlaps("S3://models/m/job", inputs)
