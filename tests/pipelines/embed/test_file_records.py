"""The incremental embed's bookkeeping, without a model (pipelines/embed/file_records.py):
which files a run keeps, embeds and drops, and which done-records of a killed run it adopts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from sbert_pipeline import embed
from sbert_pipeline.embed.file_records import (
    InputFile,
    adoptable,
    hash_inputs,
    part_digest,
    plan_version,
    row_sharing_settings,
)
from sbert_pipeline.stage_api.options import OptionError

LAUNCH = {
    "kind": "embeddings",
    "model_id": "m",
    "weights_sha256": "0" * 64,
    "dim": 4,
    "dtype": "float32",
    "keep_text": False,
    "input": {"pattern": "in/*.txt", "text_field": "text", "id_field": None},
    "runner": "FnApiRunner",
    "software": {"sbert_pipeline": "1"},
    "compute": {"path": "fp32"},
}


def _inputs(folder: Path, contents: dict[str, str]) -> list[InputFile]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in contents.items():
        (folder / name).write_text(text)
    files = [(str(folder / name), name, len(text)) for name, text in sorted(contents.items())]
    return hash_inputs(files)


def _publish(out: Path, inputs: list[InputFile], launch: dict = LAUNCH) -> dict:
    """A published version holding one part per input file (as an incremental embed does)."""
    out.mkdir(parents=True, exist_ok=True)
    files, commit = [], []
    for file in inputs:
        part = f"part-000000000000-{file.key}-00000-of-00001.parquet"
        data = f"rows of {file.path} {file.sha256}".encode()
        (out / part).write_bytes(data)
        commit.append(
            {"path": part, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        )
        entry = {"path": file.path, "id_prefix": file.id_prefix, "bytes": file.bytes}
        files.append({**entry, "sha256": file.sha256, "rows": 2, "embedded": 2, "rejected": 0})
        files[-1].update(parts=[part], error_parts=[], counts={})
    manifest = {
        **launch,
        "input": {**launch["input"], "files": files},
        "counts": {"read": 2 * len(files), "embedded": 2 * len(files), "rejected": 0},
        "commit": {"run_id": "0" * 12, "datasets": [""], "files": commit},
    }
    (out / "_manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_plan_keeps_unchanged_files_and_embeds_the_rest(tmp_path):
    inputs = _inputs(tmp_path / "in", {"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"})
    _publish(tmp_path / "out", inputs)
    now = _inputs(tmp_path / "in", {"b.txt": "b changed\n", "d.txt": "d\n"})
    (tmp_path / "in" / "c.txt").unlink()
    current = [inputs[0], *now]
    plan = plan_version(str(tmp_path / "out"), LAUNCH, current)
    assert plan.reason is None
    assert [e["path"] for e in plan.kept] == [inputs[0].path]
    assert [f.path for f in plan.embed] == [now[0].path, now[1].path]
    assert [e["path"] for e in plan.removed] == [inputs[1].path, inputs[2].path]
    assert [e["path"] for e in plan.keep_entries()] == plan.kept[0]["parts"]
    # The runner, the software and the machine's compute flags do not change the rows.
    elsewhere = {**LAUNCH, "runner": "DataflowRunner", "compute": {"path": "bf16"}}
    assert plan_version(str(tmp_path / "out"), elsewhere, current).reason is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"weights_sha256": "1" * 64}, "settings changed: weights_sha256"),
        ({"dtype": "float16"}, "settings changed: dtype"),
        (
            {"input": {**LAUNCH["input"], "text_field": "body"}},
            "settings changed: input.text_field",
        ),
    ],
)
def test_changed_settings_mean_a_full_run(tmp_path, change, reason):
    inputs = _inputs(tmp_path / "in", {"a.txt": "a\n"})
    _publish(tmp_path / "out", inputs)
    plan = plan_version(str(tmp_path / "out"), {**LAUNCH, **change}, inputs)
    assert plan.reason == reason and not plan.kept and plan.embed == tuple(inputs)


def test_full_runs_say_why(tmp_path):
    inputs = _inputs(tmp_path / "in", {"a.txt": "a\n"})
    assert plan_version(str(tmp_path / "none"), LAUNCH, inputs).reason == "no previous version"
    manifest = _publish(tmp_path / "out", inputs)
    other = _inputs(tmp_path / "in", {"a.txt": "a, rewritten\n"})
    assert plan_version(str(tmp_path / "out"), LAUNCH, other).reason == "no input file is unchanged"
    del manifest["input"]["files"][0]["parts"]
    (tmp_path / "out" / "_manifest.json").write_text(json.dumps(manifest))
    assert "no per-file parts" in plan_version(str(tmp_path / "out"), LAUNCH, inputs).reason
    (tmp_path / "out" / manifest["commit"]["files"][0]["path"]).write_bytes(b"damaged!")
    assert "cannot be used" in plan_version(str(tmp_path / "out"), LAUNCH, inputs).reason


def _done(area: Path, file: InputFile, settings: dict, basis: list, *, part_size: int = 3) -> None:
    part = f"part-{file.key}-00000-of-00001.parquet"
    (area / "_done").mkdir(parents=True, exist_ok=True)
    (area / part).write_bytes(b"xyz")
    digest = part_digest(str(area / part), 3)
    record = {
        "path": file.path,
        "id_prefix": file.id_prefix,
        "bytes": file.bytes,
        "sha256": file.sha256,
        "parts": [part],
        "error_parts": [],
        "part_bytes": {part: part_size},
        "part_xxh3_128": {part: digest},
        "settings": settings,
        "basis": basis,
    }
    (area / "_done" / f"{file.key}.json").write_text(json.dumps(record))


def test_adopts_only_records_of_the_same_file_settings_and_id_basis(tmp_path):
    inputs = _inputs(
        tmp_path / "in", {"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n", "d.txt": "d"}
    )
    plan = plan_version(str(tmp_path / "out"), LAUNCH, inputs)
    settings = row_sharing_settings(LAUNCH)
    area = tmp_path / "area"
    a, b, c, d = inputs
    _done(area, a, settings, plan.basis(a))  # adopted
    _done(area, b, {**settings, "dtype": "float16"}, plan.basis(b))  # other settings
    _done(area, c, settings, [["elsewhere", "0"]])  # ids checked against other files
    _done(area, d, settings, plan.basis(d), part_size=4)  # its part is not what it recorded
    adopted = adoptable(plan, None, str(area))
    assert adopted == {f"_done/{f.key}.json" for f in (a, c)} | {
        f"part-{f.key}-00000-of-00001.parquet" for f in (a, c)
    }
    with_ids = adoptable(plan, "id", str(area))
    assert with_ids == {f"_done/{a.key}.json", f"part-{a.key}-00000-of-00001.parquet"}
    (tmp_path / "in" / "a.txt").write_text("a changed\n")
    rehashed = hash_inputs([(f.path, f.id_prefix, Path(f.path).stat().st_size) for f in inputs])
    changed = plan_version(str(tmp_path / "out"), LAUNCH, rehashed)
    assert f"_done/{a.key}.json" not in adoptable(changed, None, str(area))
    assert f"_done/{c.key}.json" in adoptable(changed, None, str(area))


def test_a_part_rewritten_after_its_record_or_a_record_without_digests_is_not_adopted(tmp_path):
    inputs = _inputs(tmp_path / "in", {"a.txt": "a\n", "b.txt": "b\n"})
    plan = plan_version(str(tmp_path / "out"), LAUNCH, inputs)
    area = tmp_path / "area"
    a, b = inputs
    _done(area, a, row_sharing_settings(LAUNCH), plan.basis(a))
    _done(area, b, row_sharing_settings(LAUNCH), plan.basis(b))
    assert adoptable(plan, None, str(area)) == {
        name
        for f in (a, b)
        for name in (f"_done/{f.key}.json", f"part-{f.key}-00000-of-00001.parquet")
    }
    (area / f"part-{a.key}-00000-of-00001.parquet").write_bytes(b"xyZ")  # same size
    record = json.loads((area / "_done" / f"{b.key}.json").read_text())
    del record["part_xxh3_128"]
    (area / "_done" / f"{b.key}.json").write_text(json.dumps(record))
    assert adoptable(plan, None, str(area)) == set()


def test_an_incremental_embed_refuses_a_given_pipeline(tmp_path):
    options = embed.Options(
        input=str(tmp_path / "*.txt"), output=str(tmp_path / "out"), incremental=True
    )
    with pytest.raises(OptionError, match=r"--incremental: .*takes no pipeline"):
        embed.run(options, pipeline=object())
    assert not (tmp_path / "out").exists()
