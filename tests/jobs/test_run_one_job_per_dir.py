"""One job per job directory, one run at a time.

A ``job_dir`` another job config made (another corpus, model or way of reading it) is refused
before anything in it is written, ``--only`` included, while changed stage parameters and an
added stage go on; a second ``sbert run`` on a job directory another run holds is refused,
naming that run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sbert_pipeline.io.output_dir import OutputLockedError
from sbert_pipeline.jobs.run import run

JOB_FILES = ("job.yaml", "_job_state.json", "report.html")


def write_corpus(path: Path, prefix: str) -> Path:
    rows = [{"id": f"{prefix}{i}", "text": f"{prefix} text number {i}"} for i in range(6)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_config(path: Path, job_dir: Path, corpus: Path, model: Path) -> Path:
    path.write_text(
        f"job_dir: {job_dir}\n"
        f"input: {{path: {corpus}, id_field: id}}\n"
        f"model: {model}\n"
        "stages: [embed, pairs, dedup]\n"
        "pairs: {k: 3, threshold: 0.5, method: exact}\n"
        "dedup: {threshold: 0.5}\n",
        encoding="utf-8",
    )
    return path


def job_files(job_dir: Path) -> dict[str, tuple[bytes, int]]:
    return {
        name: ((job_dir / name).read_bytes(), (job_dir / name).stat().st_mtime_ns)
        for name in JOB_FILES
    }


@pytest.fixture
def job(tmp_path, tiny_st_dir) -> tuple[Path, Path]:
    """A finished job: (its config, its job directory)."""
    job_dir = tmp_path / "job"
    corpus = write_corpus(tmp_path / "a.jsonl", "a")
    config = write_config(tmp_path / "job.yaml", job_dir, corpus, tiny_st_dir)
    run([str(config)])
    return config, job_dir


def test_only_on_a_job_dir_another_config_made_is_refused_and_writes_nothing(
    tmp_path, tiny_st_dir, job
) -> None:
    _, job_dir = job
    other_corpus = write_corpus(tmp_path / "b.jsonl", "b")
    other = write_config(tmp_path / "other.yaml", job_dir, other_corpus, tiny_st_dir)
    before = job_files(job_dir)
    with pytest.raises(
        ValueError,
        match=rf"^job_dir: {job_dir} holds the outputs of another job "
        r"\(input.path was '.*a.jsonl' there, is '.*b.jsonl' here\)",
    ):
        run([str(other), "--only", "dedup"])
    assert job_files(job_dir) == before
    with pytest.raises(ValueError, match=r"\(model was "):
        run([str(job[0]), "--set", "model=all-MiniLM-L6-v2"])
    assert job_files(job_dir) == before


def test_changed_parameters_and_an_added_stage_are_the_same_job(job) -> None:
    config, _ = job
    summary = run([str(config), "--only", "dedup", "--set", "dedup.threshold=0.7"])
    assert [s.status for s in summary.stages] == ["not run", "not run", "ran"]
    summary = run([str(config), "--set", "stages=[embed, index, pairs, dedup]"])
    assert {s.name: s.status for s in summary.stages}["index"] == "ran"


HOLDER = textwrap.dedent(
    """
    import fcntl, json, os, sys
    job_dir = sys.argv[1]
    fd = os.open(job_dir, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    marker = {"pid": os.getpid(), "host": "here", "started": "now", "command": "sbert run a.yaml"}
    with open(os.path.join(job_dir, "_STARTED"), "w") as handle:
        json.dump(marker, handle)
    print("held", flush=True)
    sys.stdin.read()  # holds the lock until the test closes its stdin
    """
)


def test_a_second_run_on_a_held_job_dir_is_refused_naming_the_holder(job) -> None:
    config, job_dir = job
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(job_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        before = job_files(job_dir)
        expected = rf"^job_dir: {job_dir} is in use by another run \(pid {holder.pid} "
        expected += r".*\(sbert run a.yaml\)\)"
        with pytest.raises(OutputLockedError, match=expected):
            run([str(config), "--force", "all"])
        assert job_files(job_dir) == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    summary = run([str(config)])  # the lock went with the holder
    assert {s.status for s in summary.stages} == {"skipped"}
    assert not (job_dir / "_STARTED").exists()  # a run removes its marker when it ends
