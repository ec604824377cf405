"""Item 3 of issue 25: a stage reads a published folder only if its files hold what the manifest
recorded, not only their sizes.

The reproduction: one float of one vector of an embeddings part negated in place (the file keeps
its size and still decodes). Pairs, cluster and index read it with exit 0 before; now each
refuses in one line naming the file, with the CLI's exit status for a user's error, and
publishes nothing; ``--no-verify`` reads the folder as it is.
"""

from __future__ import annotations

import json
import shutil
import struct

import pyarrow.parquet as pq
import pytest
import yaml
from output_folders_helpers import embed_argv, texts, write_txt
from sbert_pipeline.io import content_checks
from sbert_pipeline.io.content_checks import ListedFile, changed_files
from sbert_pipeline.io.output_dir import MANIFEST, CorruptOutputError, read_manifest
from sbert_pipeline.jobs.cli import main as cli
from sbert_pipeline.jobs.run import main as run_main
from sbert_pipeline.jobs.run_config import load_run_config
from sbert_pipeline.jobs.run_inputs import check_job_inputs
from sbert_pipeline.jobs.run_stages import plan_stages

from tests.stage_commands import embed, pairs

# Each stage reading the embeddings, with options that let it run on 40 tiny vectors.
STAGES = {
    "pairs": ["--method", "exact", "--k", "3", "--threshold", "0.5"],
    "cluster": ["--k", "2"],
    "index": ["--factory", "Flat", "--queries", "5"],
}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory, tiny_st_dir):
    """A published embeddings folder of 40 texts."""
    corpus = write_txt(tmp_path_factory.mktemp("corpus"), texts(40))
    out = tmp_path_factory.mktemp("embedded") / "embeddings"
    embed(embed_argv(corpus, out, tiny_st_dir))
    return out


@pytest.fixture
def damaged(embedded, tmp_path):
    """A copy of ``embedded`` with one float of its first vector negated in place; returns the
    folder and the damaged part."""
    folder = tmp_path / "embeddings"
    shutil.copytree(embedded, folder)
    part = sorted(folder.glob("part-*.parquet"))[0]
    negate_a_float(part, "embedding")
    return folder, part


def negate_a_float(part, column: str) -> None:
    """Negate the first nonzero float of ``column``'s first row, in place: same size, and the
    file still decodes, as other numbers."""
    first = pq.read_table(part, columns=[column]).column(column)[0].as_py()
    values = first if isinstance(first, list) else [first]
    value = next(x for x in values if x != 0.0)
    data = bytearray(part.read_bytes())
    pattern = struct.pack("<f", value)
    assert data.count(pattern) == 1  # stored once, uncompressed: the flip changes just it
    at = data.index(pattern)
    data[at : at + 4] = struct.pack("<f", -value)
    size = part.stat().st_size
    part.write_bytes(bytes(data))  # in place: the size check cannot see it
    assert part.stat().st_size == size
    changed = pq.read_table(part, columns=[column]).column(column)[0].as_py()
    assert (changed if isinstance(changed, list) else [changed])[values.index(value)] == -value


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_refuses_a_part_changed_in_place_in_one_line(stage, damaged, tmp_path, capsys):
    folder, part = damaged
    output = tmp_path / "out"
    argv = [stage, "--embeddings", str(folder), "--output", str(output), *STAGES[stage]]
    assert cli(argv) == 2  # the CLI's status for a user's error
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("sbert: error: ")
    assert f"{part} does not match its digest in {folder / MANIFEST}" in err
    assert not output.exists()  # refused before the output folder is touched


@pytest.mark.parametrize("stage", STAGES)
def test_no_verify_reads_the_changed_part_as_it_is(stage, damaged, tmp_path):
    folder, _ = damaged
    output = tmp_path / "out"
    argv = [stage, "--embeddings", str(folder), "--output", str(output), *STAGES[stage]]
    assert cli([*argv, "--no-verify"]) == 0
    assert (output / MANIFEST).exists()


def test_dedup_refuses_a_pairs_part_changed_in_place(embedded, tmp_path, capsys):
    found = tmp_path / "pairs"
    pairs(["--embeddings", str(embedded), "--output", str(found), *STAGES["pairs"]])
    part = next(
        p for p in sorted((found / "pairs").glob("part-*.parquet")) if pq.read_metadata(p).num_rows
    )
    negate_a_float(part, "score")
    output = tmp_path / "dedup"
    argv = ["dedup", "--pairs", str(found), "--output", str(output), "--threshold", "0.6"]
    assert cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{part} does not match its digest" in err
    assert not output.exists()
    assert cli([*argv, "--no-verify"]) == 0


def test_read_manifest_checks_contents_unless_turned_off(damaged):
    folder, part = damaged
    with pytest.raises(CorruptOutputError, match=r"does not match its digest") as raised:
        read_manifest(str(folder))
    assert str(raised.value).startswith(str(part))
    with content_checks.content_checks(False):
        assert read_manifest(str(folder))["kind"] == "embeddings"
    with pytest.raises(CorruptOutputError):  # on again outside the block
        read_manifest(str(folder))
    assert read_manifest(str(folder), verify=False)["kind"] == "embeddings"


def test_read_manifest_names_the_first_changed_file_and_counts_the_others(damaged):
    folder, _ = damaged
    manifest = json.loads((folder / MANIFEST).read_text())
    files = manifest["commit"]["files"]
    for entry in files:
        entry["xxh3_128"] = "0" * 32  # every listed file now disagrees
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CorruptOutputError) as raised:
        read_manifest(str(folder))
    message = str(raised.value)
    assert message.startswith(f"{folder / files[0]['path']} does not match its digest")
    more = len(files) - 1
    assert more == 0 or f"(and {more} other listed file" in message


def test_a_matching_file_is_hashed_once_until_it_changes(tmp_path, monkeypatch):
    path = tmp_path / "part-0.parquet"
    path.write_bytes(b"vectors")
    digest = content_checks.digest_of(ListedFile(str(path), 7, 0.0, ""))
    hashed = []
    monkeypatch.setattr(content_checks, "digest_of", lambda entry: hashed.append(entry) or digest)
    entry = ListedFile(str(path), 7, path.stat().st_mtime, digest)
    assert changed_files([entry]) == [] and changed_files([entry]) == []
    assert len(hashed) == 1  # remembered by its identity
    rewritten = ListedFile(str(path), 7, path.stat().st_mtime + 1, digest)
    assert changed_files([rewritten]) == [] and len(hashed) == 2  # a new mtime: hashed again


def test_a_mismatch_is_not_remembered(tmp_path):
    path = tmp_path / "part-0.parquet"
    path.write_bytes(b"vectors")
    entry = ListedFile(str(path), 7, path.stat().st_mtime, "0" * 64)
    assert changed_files([entry]) == [str(path)]
    assert changed_files([entry]) == [str(path)]


def test_an_empty_file_hashes_as_the_commit_hashed_it(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert content_checks.digest_of(ListedFile(str(path), 0, 0.0, empty, "sha256")) == empty
    empty_xxh3 = "99aa06d3014798d86001c324468d497f"
    assert content_checks.digest_of(ListedFile(str(path), 0, 0.0, empty_xxh3)) == empty_xxh3


def test_a_manifest_of_an_earlier_version_is_checked_by_its_sha256(damaged):
    folder, part = damaged
    manifest = json.loads((folder / MANIFEST).read_text())
    for entry in manifest["commit"]["files"]:
        del entry["xxh3_128"]  # as written before the commit recorded it
    (folder / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CorruptOutputError, match=r"does not match its digest") as raised:
        read_manifest(str(folder))
    assert str(raised.value).startswith(str(part))


def test_sbert_run_passes_no_verify_to_every_reading_stage(tmp_path, tiny_st_dir, capsys):
    corpus = write_txt(tmp_path, texts(4))
    path = tmp_path / "job.yaml"
    path.write_text(
        f"job_dir: {tmp_path / 'job'}\ninput: {{path: {corpus}}}\nmodel: {tiny_st_dir}\n"
        "cluster: {k: 2}\n"
    )
    config = load_run_config(path)
    assert config.verify is True
    plans = plan_stages(config, check_job_inputs(config), [])
    reading = ["index", "cluster", "pairs", "dedup"]
    assert [plan.name for plan in plans if getattr(plan.options, "verify", None)] == reading
    config = load_run_config(path, ["verify=false"])
    plans = plan_stages(config, check_job_inputs(config), [])
    off = [plan.name for plan in plans if getattr(plan.options, "verify", None) is False]
    assert off == reading
    with pytest.raises(ValueError, match=r"verify"):
        load_run_config(path, ["verify=sometimes"])
    assert run_main([str(path), "--print-config", "--set", "verify=false"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["verify"] is False
