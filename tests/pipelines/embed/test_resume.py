"""Issue 28 item 2: an ``sbert embed --incremental`` killed (SIGKILL) after some of its input
files, rerun with the same settings, embeds only the files it had not finished and publishes
what a from-scratch run publishes (pipelines/embed/incremental.py, prepare_output(adopt=...))."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from corpus_files import GOOD_TEXTS
from sbert_pipeline.io.output_dir import read_manifest

N_FILES = 6


def _corpus(folder: Path) -> None:
    folder.mkdir(parents=True)
    for f in range(N_FILES):
        rows = [
            {"id": f"f{f}-{i}", "text": f"{GOOD_TEXTS[(f + i) % len(GOOD_TEXTS)]} {f} {i}"}
            for i in range(40)
        ]
        rows.append({"id": f"f{f}-empty", "text": ""})  # one dead letter per file
        (folder / f"file{f}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def _argv(corpus: Path, out: Path, model: Path) -> list[str]:
    return [
        "--verbose",
        "embed",
        "--incremental",
        "--input",
        str(corpus / "*.jsonl"),
        "--output",
        str(out),
        "--model",
        str(model),
        "--id-field",
        "id",
        "--min-batch-size",
        "8",
    ]


def _start(argv: list[str], log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "sbert_pipeline.jobs.cli", *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so SIGKILL reaches every worker
    )


def _done_records(out: Path) -> list[Path]:
    return sorted(out.glob("_attempts/*/_done/*.json"))


def _vectors(out: Path) -> dict[str, np.ndarray]:
    manifest = read_manifest(str(out))
    table = pq.read_table([out / name for name in manifest["shards"]])
    vectors = np.asarray(table.column("embedding").to_pylist(), np.float32)
    return dict(zip(table.column("id").to_pylist(), vectors, strict=True))


def test_sigkill_then_resume_embeds_only_unfinished_files(tmp_path, tiny_st_dir):
    corpus, out = tmp_path / "in", tmp_path / "out"
    _corpus(corpus)
    argv = _argv(corpus, out, tiny_st_dir)

    with open(tmp_path / "first.log", "w") as log:
        job = _start(argv, log)
        deadline = time.monotonic() + 300
        while len(_done_records(out)) < 2 and time.monotonic() < deadline:
            assert job.poll() is None, (tmp_path / "first.log").read_text()
            time.sleep(0.05)
        assert job.poll() is None, "the job finished before it could be killed"
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert not (out / "_manifest.json").exists()
    records = [json.loads(path.read_text()) for path in _done_records(out)]
    finished = sorted(record["path"] for record in records)
    assert 2 <= len(finished) < N_FILES
    killed_run = _done_records(out)[0].parent.parent.name
    assert json.loads((out / "_STARTED").read_text())["run_id"] == killed_run

    with open(tmp_path / "second.log", "w") as log:
        assert _start(argv, log).wait(timeout=600) == 0, (tmp_path / "second.log").read_text()
    log_text = (tmp_path / "second.log").read_text()
    manifest = read_manifest(str(out))
    section = manifest["incremental"]
    assert section["mode"] == "full" and section["resumed"] == finished
    assert manifest["commit"]["run_id"] == killed_run  # the rerun went on under its id
    embedded = sorted(re.findall(r"(\S+file\d\.jsonl): \d+ rows embedded", log_text))
    everything = sorted(str(path) for path in corpus.glob("*.jsonl"))
    assert embedded == sorted(set(everything) - set(finished)), log_text
    assert f"{len(finished)} file(s) already embedded" in log_text
    assert not list(out.glob("_attempts"))

    scratch = tmp_path / "scratch"
    scratch_argv = _argv(corpus, scratch, tiny_st_dir)
    with open(tmp_path / "scratch.log", "w") as log:
        assert _start(scratch_argv, log).wait(timeout=600) == 0
    expected = read_manifest(str(scratch))
    assert manifest["counts"] == expected["counts"]
    assert manifest["counts"]["rejected"] == N_FILES
    assert [
        (e["path"], e["rows"], e["embedded"], e["rejected"]) for e in manifest["input"]["files"]
    ] == [(e["path"], e["rows"], e["embedded"], e["rejected"]) for e in expected["input"]["files"]]
    got, want = _vectors(out), _vectors(scratch)
    assert sorted(got) == sorted(want) and len(got) == N_FILES * 40
    for row_id, vector in want.items():
        np.testing.assert_allclose(got[row_id], vector, atol=1e-5)
