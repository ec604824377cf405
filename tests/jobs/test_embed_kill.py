"""A local embed run killed half way leaves no manifest; a plain rerun completes it exactly."""

import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
from corpus_files import write_corpus
from testdata import DATA_DIR, read_tsv


def _start(argv, log):
    return subprocess.Popen(
        [sys.executable, "-m", "sbert_pipeline.jobs.cli", "embed", *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so SIGKILL reaches every worker
    )


def test_kill_and_rerun(tmp_path, tiny_st_dir):
    texts = [
        row["text"] for row in read_tsv(DATA_DIR / "corpus" / "short_texts_en.tsv.gz")[:60_000]
    ]
    write_corpus(tmp_path / "in", "txt", texts[:30_000], name="a")
    write_corpus(tmp_path / "in", "txt", texts[30_000:], name="b")
    out = tmp_path / "out"
    argv = [
        "--input",
        str(tmp_path / "in" / "*.txt"),
        "--output",
        str(out),
        "--model",
        str(tiny_st_dir),
    ]

    with open(tmp_path / "first.log", "w") as log:
        job = _start(argv, log)
        deadline = time.monotonic() + 120
        while not (out / "_STARTED").exists() and time.monotonic() < deadline:
            assert job.poll() is None, (tmp_path / "first.log").read_text()
            time.sleep(0.05)
        time.sleep(2.0)  # well inside a run that takes ~10 s
        assert job.poll() is None, "the job finished before it could be killed; use a larger corpus"
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert not (out / "_manifest.json").exists()

    with open(tmp_path / "second.log", "w") as log:
        rerun = _start(argv, log)
        assert rerun.wait(timeout=300) == 0, (tmp_path / "second.log").read_text()
    assert (out / "_manifest.json").exists()
    assert not (out / "_STARTED").exists()
    ids = pq.read_table(sorted(out.glob("part-*.parquet")), columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(texts) == len(set(ids))
    assert set(ids) == {f"{name}.txt:{row}" for name in "ab" for row in range(1, 30_001)}
    assert not list(out.glob("beam-temp-*"))
