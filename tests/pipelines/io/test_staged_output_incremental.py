"""What an incremental run needs of the staged commit (pipelines/io/staged_output.py):
carrying published files over into the next version (``commit(keep=...)``), replacing our own
output of one kind without ``--overwrite`` (``replace_kind``), and adopting a killed run's
finished work by record (``adopt``)."""

from __future__ import annotations

import json
import os

import pytest
from sbert_pipeline.io.output_dir import (
    CorruptOutputError,
    OutputExistsError,
    OutputLayout,
    read_manifest,
)
from sbert_pipeline.io.staged_output import prepare_output

LAYOUT = OutputLayout(datasets=("", "_errors"))


def _run(out, **kwargs):
    return prepare_output(
        str(out), overwrite=False, job={"command": "test"}, layout=LAYOUT, **kwargs
    )


def _publish(out, files: dict[str, bytes], keep=(), **kwargs) -> dict:
    with _run(out, **kwargs) as run:
        for name, data in files.items():
            path = out / "_attempts" / run.run_id / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return run.commit({"kind": "test"}, keep=keep)


def _entry(manifest: dict, name_part: str) -> dict:
    return next(e for e in manifest["commit"]["files"] if name_part in e["path"])


def test_kept_files_stay_with_their_entries_and_the_others_go(tmp_path):
    out = tmp_path / "out"
    first = _publish(out, {"part-a.txt": b"a", "part-b.txt": b"b", "sub/ea.txt": b"ea"})
    kept = [_entry(first, "part-a"), _entry(first, "sub/")]
    second = _publish(out, {"part-c.txt": b"c"}, keep=kept, replace_kind="test")
    listed = {e["path"]: e for e in second["commit"]["files"]}
    assert [listed[e["path"]] for e in kept] == kept  # same path, bytes, digests
    assert (out / kept[0]["path"]).read_bytes() == b"a"
    assert not (out / _entry(first, "part-b")["path"]).exists()
    assert len(listed) == 3 and (out / _entry(second, "part-c")["path"]).read_bytes() == b"c"
    assert read_manifest(str(out)) == second  # sizes and digests verified
    assert sorted(os.listdir(out)) == sorted(
        ["_manifest.json", "sub", *(p for p in listed if "/" not in p)]
    )


def test_a_kept_file_that_changed_or_is_not_listed_publishes_nothing(tmp_path):
    out = tmp_path / "out"
    first = _publish(out, {"part-a.txt": b"a"})
    entry = _entry(first, "part-a")
    (out / entry["path"]).write_bytes(b"longer")
    with pytest.raises(
        CorruptOutputError, match=r"to be kept.*missing, a link, or not of the 1 bytes"
    ):
        _publish(out, {"part-c.txt": b"c"}, keep=[entry], replace_kind="test")
    assert json.loads((out / "_manifest.json").read_text()) == first
    (out / entry["path"]).write_bytes(b"a")
    with pytest.raises(CorruptOutputError, match="does not list it with that entry"):
        _publish(out, {}, keep=[{**entry, "sha256": "0" * 64}], replace_kind="test")
    assert json.loads((out / "_manifest.json").read_text()) == first


def test_a_kept_file_rewritten_with_its_size_kept_publishes_nothing(tmp_path):
    out = tmp_path / "out"
    first = _publish(out, {"part-a.txt": b"a", "part-b.txt": b"b"})
    entry = _entry(first, "part-a")
    (out / entry["path"]).write_bytes(b"z")  # same size, other bytes
    with pytest.raises(CorruptOutputError, match=r"to be kept no longer holds.*published nothing"):
        _publish(out, {"part-c.txt": b"c"}, keep=[entry], replace_kind="test")
    assert json.loads((out / "_manifest.json").read_text()) == first
    assert (out / _entry(first, "part-b")["path"]).read_bytes() == b"b"  # nothing deleted


def test_replace_kind_takes_only_our_own_output_of_that_kind(tmp_path):
    out = tmp_path / "out"
    _publish(out, {"part-a.txt": b"a"})
    with pytest.raises(OutputExistsError, match="--overwrite"):
        _run(out, replace_kind="other")
    (out / "notes.txt").write_text("not ours")
    with pytest.raises(OutputExistsError, match="did not write"):
        _run(out, replace_kind="test")
    (out / "notes.txt").unlink()
    _run(out, replace_kind="test").release()


def test_adopt_keeps_what_it_names_from_a_killed_run_and_clears_the_rest(tmp_path):
    out = tmp_path / "out"
    killed = _run(out)
    area = out / "_attempts" / killed.run_id
    for name in ("_done/x.json", "part-x.txt", "part-y.txt", "_groups/y/part-0.txt"):
        (area / name).parent.mkdir(parents=True, exist_ok=True)
        (area / name).write_text(name)
    killed.release()  # as a SIGKILL leaves it: _STARTED names the run, its area is full

    seen = []

    def adopt(path: str) -> list[str]:
        seen.append(path)
        return ["_done/x.json", "part-x.txt", "../escape", "missing.txt"]

    resumed = _run(out, adopt=adopt)
    assert seen == [str(area)]
    assert resumed.run_id == killed.run_id
    assert json.loads((out / "_STARTED").read_text())["run_id"] == killed.run_id
    left = sorted(str(p.relative_to(area)) for p in area.rglob("*") if p.is_file())
    assert left == ["_done/x.json", "part-x.txt"]
    resumed.release()

    # Adopting nothing: a fresh run id, and the killed run's area is cleared as before.
    fresh = _run(out, adopt=lambda path: [])
    assert fresh.run_id != killed.run_id and not area.exists()
    fresh.release()
