"""Item 3 of issue 13: one writer per output folder.

On local disks a live run holds a lock on the folder and a second run is refused with the
holder's pid, host and start time; where there is no lock (object stores) a run whose id is no
longer in ``_STARTED`` publishes nothing.
"""

from __future__ import annotations

import json
import socket
import time

import pytest
from output_folders_helpers import embed_argv, start_cli, texts, write_txt
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.io.output_dir import OutputLayout, OutputLockedError
from sbert_pipeline.io.staged_output import prepare_output

from tests.stage_commands import embed


def test_a_second_run_on_a_held_folder_is_refused_naming_the_holder(tmp_path, tiny_st_dir):
    out = tmp_path / "out"
    big = write_txt(tmp_path / "big", texts(8_000))
    small = write_txt(tmp_path / "small", texts(200, offset=40_000))
    holder = start_cli(["embed", *embed_argv(big, out, tiny_st_dir)], tmp_path / "holder.log")
    deadline = time.monotonic() + 120
    while not (out / "_STARTED").exists() and time.monotonic() < deadline:
        assert holder.poll() is None, (tmp_path / "holder.log").read_text()
        time.sleep(0.05)
    time.sleep(0.5)  # the marker is written whole before the pipeline starts
    assert holder.poll() is None, "the first run finished too early; use a larger corpus"
    with pytest.raises(OutputLockedError, match=rf"pid {holder.pid} on {socket.gethostname()}"):
        embed(embed_argv(small, out, tiny_st_dir, "--overwrite"))
    assert holder.wait(timeout=300) == 0, (tmp_path / "holder.log").read_text()

    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["counts"]["read"] == manifest["counts"]["embedded"] == 8_000
    assert [f["path"] for f in manifest["input"]["files"]] == [str(big)]
    data = EmbeddingsDataset.open(str(out))  # the shards agree with the manifest
    assert data.count == 8_000
    assert sum(e["rows"] for e in manifest["commit"]["files"] if "/" not in e["path"]) == 8_000


def test_a_run_that_lost_the_folder_publishes_nothing(tmp_path):
    """What object stores rely on: the run id in ``_STARTED`` is checked before publishing."""
    out = tmp_path / "out"
    run = prepare_output(str(out), overwrite=False, job={"command": "test"}, layout=OutputLayout())
    (out / "_attempts" / run.run_id).mkdir(parents=True)
    (out / "_attempts" / run.run_id / "result.txt").write_text("mine")
    (out / "_STARTED").write_text(json.dumps({"run_id": "fedcba987654", "pid": 1}))
    with pytest.raises(OutputLockedError, match=r"taken over by another run.*published nothing"):
        run.commit({"kind": "test"})
    run.release()
    assert not (out / "_manifest.json").exists() and not (out / "result.txt").exists()
