"""``sbert run`` end to end: examples/quickstart.yaml on a 300-row slice of the bundled sample.

The job runs once per module with the quickstart's own settings (default model, local runner,
every stage); the tests then rerun it with changes and check what ran, what was skipped, what
the report says, and that invalid configs and failed stages leave the job directory as it was.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sbert_pipeline.jobs.cli import main as cli_main
from sbert_pipeline.jobs.run import StageFailedError, run
from sbert_pipeline.jobs.run_config import DEFAULT_STAGES

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
SAMPLE = ROOT / "examples" / "sample_corpus.jsonl"
ROWS = 300
PLANTED = 60

pytestmark = pytest.mark.slow  # the packaged all-MiniLM-L6-v2, as the quickstart uses


def slice_of_sample(path: Path) -> list[dict]:
    """60 planted near-duplicates with their originals, then other rows up to 300."""
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    by_id = {row["id"]: row for row in rows}
    chosen: dict[str, dict] = {}
    for row in rows:
        if row["duplicate_of"] and len(chosen) < 2 * PLANTED:
            chosen[row["id"]] = row
            chosen[row["duplicate_of"]] = by_id[row["duplicate_of"]]
    for row in rows:
        if len(chosen) >= ROWS:
            break
        if not row["duplicate_of"]:
            chosen.setdefault(row["id"], row)
    path.write_text("".join(json.dumps(row) + "\n" for row in chosen.values()), encoding="utf-8")
    return list(chosen.values())


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The quickstart on the slice, run once: (argv of the baseline, job dir, rows, summary)."""
    root = tmp_path_factory.mktemp("run_job")
    rows = slice_of_sample(root / "corpus.jsonl")
    job_dir = root / "job"
    argv = [
        str(QUICKSTART),
        "--set",
        f"input.path={root / 'corpus.jsonl'}",
        "--set",
        f"job_dir={job_dir}",
        "--set",
        "cluster.k=6",
    ]
    return argv, job_dir, rows, run(argv)


def statuses(summary) -> dict[str, str]:
    return {stage.name: stage.status for stage in summary.stages}


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under ``directory``: (size, mtime in ns)."""
    return {
        str(path.relative_to(directory)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(directory.rglob("*"))
    }


def test_first_run_runs_every_stage_and_writes_every_output(job) -> None:
    _, job_dir, _, summary = job
    assert statuses(summary) == dict.fromkeys(DEFAULT_STAGES, "ran")
    for folder in ("embeddings", "index", "clusters", "pairs", "dedup"):
        assert (job_dir / folder / "_manifest.json").is_file(), folder
    state = json.loads((job_dir / "_job_state.json").read_text())
    assert sorted(state["stages"]) == sorted(DEFAULT_STAGES)
    facts = {stage.name: stage.facts for stage in summary.stages}
    assert facts["embed"] == {"read": ROWS, "embedded": ROWS, "rejected": 0}
    assert facts["cluster"]["clusters"] == 6
    manifest = json.loads((job_dir / "dedup" / "_manifest.json").read_text())
    dedup = manifest["counts"]
    assert dedup["rows_in"] == dedup["kept"] + dedup["removed"] == ROWS
    # The corpus names its planted duplicates (duplicate_of, kept): the known-duplicate fact.
    found = manifest["known_duplicates"]["at_threshold"]["found"]
    assert facts["dedup"] == {
        **{k: dedup[k] for k in ("groups", "removed", "kept")},
        "known duplicates found": f"{found} of {PLANTED}",
    }


def test_planted_duplicates_land_in_their_originals_groups(job) -> None:
    _, job_dir, rows, _ = job
    groups = pq.read_table(job_dir / "dedup" / "groups.parquet").to_pylist()
    group_of = {row["id"]: row["group"] for row in groups}
    planted = [(row["id"], row["duplicate_of"]) for row in rows if row["duplicate_of"]]
    found = sum(1 for a, b in planted if a in group_of and group_of[a] == group_of.get(b))
    assert len(planted) == PLANTED
    # On the whole sample 144 of 150 planted pairs reach cosine 0.9 with all-MiniLM-L6-v2; the
    # rest (mostly a statement turned into a question) stay just below it.
    assert found >= 0.85 * PLANTED
    # dedup counts the same from the embeddings' duplicate_of field, and the report says it
    known = json.loads((job_dir / "dedup" / "_manifest.json").read_text())["known_duplicates"]
    assert known["pairs"] == PLANTED and known["at_threshold"]["found"] == found
    page = re.sub(r"<[^>]+>", "", (job_dir / "report.html").read_text(encoding="utf-8"))
    assert f"Of the {PLANTED} known duplicate pairs" in page
    assert f"{found} ended in one group" in page


def test_report_has_the_counts_and_needs_nothing_from_outside(job) -> None:
    _, job_dir, _, summary = job
    assert summary.report == str(job_dir / "report.html")
    page = (job_dir / "report.html").read_text(encoding="utf-8")
    facts = {stage.name: stage.facts for stage in summary.stages}
    for value, label in [
        (facts["embed"]["read"], "rows read"),
        (facts["embed"]["embedded"], "embedded"),
        (facts["embed"]["rejected"], "rejected"),
        (facts["cluster"]["clusters"], "clusters"),
        (facts["pairs"]["pairs"], "similar pairs"),
        (facts["dedup"]["groups"], "duplicate groups"),
        (facts["dedup"]["removed"], "removed"),
    ]:
        assert f"<b>{value:,}</b><span>{label}</span>" in page, label
    assert page.count("<svg") == 3  # threshold sweep, pair similarity, cluster sizes
    assert "Largest duplicate groups" in page and "Largest clusters" in page
    # Self-contained: no script, stylesheet, font or image from anywhere else.
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert not re.search(r"<script|<link|<iframe|<img|@import|url\(", page, re.IGNORECASE)
    # Every link is relative and points at something in the job directory, or at a section.
    links = re.findall(r'href="([^"]+)"', page)
    assert "embeddings/" in links and "dedup/groups.parquet" in links
    anchors = set(re.findall(r'id="([^"]+)"', page))
    for link in links:
        if link.startswith("#"):
            assert link[1:] in anchors, link
        else:
            assert (job_dir / link).exists(), link


def test_report_escapes_texts_from_the_corpus(job) -> None:
    _, job_dir, rows, _ = job
    page = (job_dir / "report.html").read_text(encoding="utf-8")
    shown = [row["text"] for row in rows if row["text"] in page or _escaped(row["text"]) in page]
    assert shown, "the report shows no corpus text at all"
    for text in shown:
        if any(char in text for char in '<>&"'):
            assert _escaped(text) in page


def _escaped(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_rerun_with_no_change_does_no_stage_work(job, capsys) -> None:
    argv, job_dir, _, _ = job
    run(argv)  # back to the baseline whatever ran before
    before = snapshot(job_dir)
    assert cli_main(["run", *argv]) == 0
    printed = capsys.readouterr().out
    for stage in DEFAULT_STAGES:
        assert re.search(rf"^{stage}\s+skipped", printed, re.MULTILINE), stage
    assert "0 stage(s) ran, 5 skipped" in printed
    after = snapshot(job_dir)
    changed = {name for name in before if before[name] != after.get(name)}
    # Only the job's own files are rewritten; no stage output changes.
    assert changed <= {"report.html", "job.yaml", "_job_state.json"}


def test_changing_only_the_dedup_threshold_reruns_only_dedup(job) -> None:
    argv, job_dir, _, _ = job
    run(argv)
    manifests = {p: p.stat().st_mtime_ns for p in job_dir.glob("*/_manifest.json")}
    summary = run([*argv, "--set", "dedup.threshold=0.95"])
    assert statuses(summary) == {**dict.fromkeys(DEFAULT_STAGES, "skipped"), "dedup": "ran"}
    for path, mtime in manifests.items():
        assert (path.stat().st_mtime_ns == mtime) == (path.parent.name != "dedup"), path
    stricter = json.loads((job_dir / "dedup" / "_manifest.json").read_text())
    assert stricter["threshold"] == 0.95
    # Back to 0.9: dedup runs again (its recorded parameters are 0.95 now), nothing else.
    assert statuses(run(argv)) == {**dict.fromkeys(DEFAULT_STAGES, "skipped"), "dedup": "ran"}


def test_force_reruns_a_stage_and_what_reads_it(job) -> None:
    argv, _, _, _ = job
    run(argv)
    summary = run([*argv, "--force", "pairs"])
    assert statuses(summary) == {
        **dict.fromkeys(DEFAULT_STAGES, "skipped"),
        "pairs": "ran",
        "dedup": "ran",  # its input, the pairs output, is a new one
    }


def test_only_runs_the_named_stage(job) -> None:
    argv, _, _, _ = job
    run(argv)
    summary = run([*argv, "--only", "index", "--force", "index"])
    assert statuses(summary) == {**dict.fromkeys(DEFAULT_STAGES, "not run"), "index": "ran"}
    assert summary.stages[0].facts["read"] == ROWS  # outputs not run now are still reported


def test_failed_stage_stops_the_job_keeps_the_rest_and_explains(job, capsys) -> None:
    argv, job_dir, _, _ = job
    run(argv)
    bad = [*argv, "--set", f"cluster.k={ROWS + 1}"]
    with pytest.raises(StageFailedError) as err:
        run(bad)
    assert statuses(err.value.summary) == {
        "embed": "skipped",
        "index": "skipped",
        "cluster": "failed",
        "pairs": "not run",
        "dedup": "not run",
    }
    assert cli_main(["run", *bad]) == 1
    message = capsys.readouterr().err.strip()
    assert "\n" not in message
    assert message.startswith("sbert run: stage cluster failed after")
    assert f"--k {ROWS + 1} is more than the {ROWS} embeddings" in message
    assert f"are kept in {job_dir}" in message and f"--set cluster.k={ROWS + 1}" in message
    # The stage failed before it touched its output: that output and its record stay valid.
    assert "still holds the complete output of an earlier run" in message
    assert statuses(run(argv)) == dict.fromkeys(DEFAULT_STAGES, "skipped")


@pytest.mark.parametrize("flag, traceback", [("-q", False), ("-v", True)])
def test_a_failed_stage_prints_its_traceback_only_with_v(job, flag, traceback) -> None:
    argv, _, _, _ = job
    run(argv)
    bad = [*argv, "--set", f"cluster.k={ROWS + 1}"]
    done = subprocess.run(
        [sys.executable, "-m", "sbert_pipeline.jobs.cli", flag, "run", *bad],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 1 and "stage cluster failed after" in done.stderr
    assert ("Traceback" in done.stderr) == traceback, done.stderr


def _as_killed_before_its_manifest(folder) -> None:
    """Leave ``folder`` as a commit killed after moving its files, before its manifest: the
    run's ``_STARTED`` and commit record name them, and no manifest is there."""
    manifest = json.loads((folder / "_manifest.json").read_text())
    run_id = manifest["commit"]["run_id"]
    published = [entry["path"] for entry in manifest["commit"]["files"]]
    (folder / "_attempts" / run_id).mkdir(parents=True)
    record = {"run_id": run_id, "publishes": published, "replaced": []}
    (folder / "_attempts" / run_id / "_commit.json").write_text(json.dumps(record))
    (folder / "_STARTED").write_text(json.dumps({"run_id": run_id, "pid": 1}))
    (folder / "_manifest.json").unlink()


def test_a_stage_whose_output_was_lost_runs_again(job) -> None:
    argv, job_dir, _, _ = job
    run(argv)
    _as_killed_before_its_manifest(job_dir / "clusters")
    summary = run(argv)
    assert statuses(summary) == {**dict.fromkeys(DEFAULT_STAGES, "skipped"), "cluster": "ran"}
    assert (job_dir / "clusters" / "_manifest.json").is_file()
    assert not (job_dir / "clusters" / "_attempts").exists()


def test_files_left_without_any_record_of_ours_are_refused_not_deleted(job) -> None:
    argv, job_dir, _, _ = job
    run(argv)
    manifest = job_dir / "clusters" / "_manifest.json"
    kept = manifest.read_bytes()
    manifest.unlink()  # deleted by hand: nothing records the stage's files any more
    before = snapshot(job_dir / "clusters")
    with pytest.raises(StageFailedError, match=r"clusters holds .*centroids\.npy"):
        run(argv)
    assert snapshot(job_dir / "clusters") == before
    manifest.write_bytes(kept)  # the module's job folder, whole again for the tests after


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["stages=[embed, index, clustering]"], r"stages\[2\]: 'clustering' is not one of"),
        (["input.path=/nonexistent/corpus*.jsonl"], r"input.path: no files match"),
        (["dedup.threshold=very high"], r"dedup.threshold: expected a number"),
        (["cluster.k=[1, 2]"], r"cluster.k: expected an integer"),
        (["model=/nonexistent/model"], r"model: model directory /nonexistent/model does not"),
        (["index.factory=IVF64,NoSuchCodec"], r"index.factory: FAISS cannot build the index"),
    ],
)
def test_invalid_config_gives_one_message_and_changes_nothing(job, capsys, overrides, message):
    argv, job_dir, _, _ = job
    run(argv)
    before = snapshot(job_dir)
    command = ["run", *argv]
    for override in overrides:
        command += ["--set", override]
    status = cli_main(command)
    error = capsys.readouterr().err.strip()
    assert status == 2
    assert len(error.splitlines()) == 1 and re.search(message, error), error
    assert snapshot(job_dir) == before


def test_finetune_stage_feeds_its_model_to_embed(tmp_path, tiny_st_dir) -> None:
    """``model: finetune``: the embed stage uses the model the job trained, and a change to the
    training reruns everything after it."""
    import random

    import torch
    import yaml
    from training_examples import TOPICS, scored_pairs, sentence, write_tsv

    train = write_tsv(
        tmp_path / "train.tsv", ("sentence1", "sentence2", "score"), scored_pairs(32, 1)
    )
    recipe = {
        "model": str(tiny_st_dir),
        "objective": {"name": "cosine"},
        "train": {"path": str(train)},
        "evaluate_base_model": False,
        "training": {"epochs": 1, "batch_size": 8, "device": "cpu", "num_threads": 1},
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(recipe))
    rng = random.Random(0)
    texts = [sentence(rng, i % len(TOPICS)) for i in range(30)]
    (tmp_path / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    job = {
        "job_dir": str(tmp_path / "job"),
        "input": {"path": str(tmp_path / "corpus.jsonl"), "id_field": "id"},
        "model": "finetune",
        "stages": ["finetune", "embed", "cluster"],
        "finetune": {"config": str(tmp_path / "train.yaml")},
        "cluster": {"k": 3},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    threads = torch.get_num_threads()
    try:
        first = run([str(tmp_path / "job.yaml")])
        assert statuses(first) == dict.fromkeys(["finetune", "embed", "cluster"], "ran")
        embedded = json.loads((tmp_path / "job" / "embeddings" / "_manifest.json").read_text())
        assert embedded["model_id"] == str((tmp_path / "job" / "model").resolve())
        assert first.stages[0].facts == {"steps": 4}
        again = run([str(tmp_path / "job.yaml")])
        assert set(statuses(again).values()) == {"skipped"}
        reseeded = run(
            [str(tmp_path / "job.yaml"), "--set", "finetune.overrides=[training.seed=7]"]
        )
        assert set(statuses(reseeded).values()) == {"ran"}
    finally:
        torch.set_num_threads(threads)
