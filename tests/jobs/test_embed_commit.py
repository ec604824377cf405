"""Issue 16 item 2: the embed pipeline counts, checks and publishes in its own last step.

Nobody has to wait for the job: run the built pipeline directly, or launch it on a runner that
returns at once (a detached submission), and ``_manifest.json`` still appears, after the shards
and matching them. A check that fails in that step fails the job and publishes nothing.
"""

from __future__ import annotations

import json
import re
import threading
from typing import ClassVar

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.runner import PipelineResult, PipelineRunner, PipelineState
from corpus_files import GOOD_TEXTS, write_bad_jsonl, write_corpus
from sbert_pipeline.embed import stage as embed
from sbert_pipeline.embed.commit import CommitRefusedError
from sbert_pipeline.io import output_dir
from sbert_pipeline.io.schemas import ERRORS_DIR
from sbert_pipeline.jobs import stage_cli
from sbert_pipeline.stage_api.stops import JobFailedError

from tests.stage_commands import embed as run_embed


def _argv(corpus, out, model, *extra) -> list[str]:
    return ["--input", str(corpus), "--output", str(out), "--model", str(model), *extra]


def _options(corpus, out, model, *extra) -> embed.Options:
    return stage_cli.parse("embed", _argv(corpus, out, model, *extra))


def _parts(directory) -> list[str]:
    return sorted(path.name for path in directory.glob("part-*.parquet"))


def _rows(paths) -> int:
    return sum(pq.ParquetFile(path).metadata.num_rows for path in paths)


@pytest.fixture
def manifest_writes(monkeypatch):
    """Records, for each manifest write, the part files already in place in its folder."""
    seen: list[dict] = []
    write = output_dir.write_manifest

    def recording(directory, manifest):
        from pathlib import Path

        folder = Path(directory)
        seen.append(
            {
                "parts": _parts(folder),
                "errors": sorted(p.name for p in (folder / ERRORS_DIR).glob("part-*.parquet")),
                "embedded": _rows(sorted(folder.glob("part-*.parquet"))),
            }
        )
        write(directory, manifest)

    monkeypatch.setattr(output_dir, "write_manifest", recording)
    return seen


def _check_matches_shards(out, manifest: dict, read: int) -> None:
    parts = _parts(out)
    errors = sorted((out / ERRORS_DIR).glob("part-*.parquet"))
    assert manifest["shards"] == parts
    listed = {entry["path"]: entry for entry in manifest["commit"]["files"]}
    assert sorted(name for name in listed if "/" not in name) == parts
    assert all(listed[name]["rows"] == _rows([out / name]) for name in parts)
    counts = manifest["counts"]
    assert counts["embedded"] == _rows(out / name for name in parts)
    assert counts["rejected"] == _rows(errors)
    assert counts["read"] == read == counts["embedded"] + counts["rejected"]
    assert sum(entry["rows"] for entry in manifest["input"]["files"]) == read
    assert not (out / "_STARTED").exists() and not (out / "_attempts").exists()


def test_running_the_built_pipeline_publishes_without_the_launcher(
    tmp_path, tiny_st_dir, manifest_writes
):
    path, good, n_bad = write_bad_jsonl(tmp_path / "in")
    out = tmp_path / "out"
    with embed.build(_options(path, out, tiny_st_dir, "--id-field", "id")) as job:
        assert not (out / "_manifest.json").exists()
        result = job.pipeline.run()  # the test waits, not the launcher
        assert result.wait_until_finish() == PipelineState.DONE
    manifest = json.loads((out / "_manifest.json").read_text())
    _check_matches_shards(out, manifest, len(good) + n_bad)
    assert manifest["counts"]["embedded"] == len(good) and manifest["counts"]["rejected"] == n_bad
    # The manifest was written once, when every shard was already in its final place.
    assert len(manifest_writes) == 1
    assert manifest_writes[0]["parts"] == manifest["shards"]
    assert manifest_writes[0]["embedded"] == manifest["counts"]["embedded"]
    assert manifest_writes[0]["errors"] == sorted(
        name.rsplit("/", 1)[-1]
        for name in (entry["path"] for entry in manifest["commit"]["files"])
        if name.startswith(f"{ERRORS_DIR}/")
    )
    # Counted in the pipeline, not read from runner metrics.
    assert manifest["counts"]["truncated"] == 1  # write_bad_jsonl's one over-long row
    assert manifest["counts"]["tokens"] > 0 and manifest["counts"]["zero_vectors"] == 0


class _Detached(PipelineResult):
    """A job running in the background, as a detached submission returns it: its work starts
    only when someone waits on it, so the test sees what the launcher left before any work."""

    def __init__(self, thread: threading.Thread, start: threading.Event, outcome: dict) -> None:
        super().__init__(PipelineState.RUNNING)
        self._thread = thread
        self._start = start
        self._outcome = outcome

    def wait_until_finish(self, duration=None):
        self._start.set()
        self._thread.join()
        if "error" in self._outcome:
            self._state = PipelineState.FAILED
            raise self._outcome["error"]
        self._state = PipelineState.DONE
        return self._state

    def cancel(self):
        raise RuntimeError("the tests never cancel a detached job")

    def metrics(self):
        # The launcher must not need the runner's metrics (a detached job has none to give).
        raise RuntimeError("the embed launcher asked a detached job for its metrics")


class DetachedRunner(PipelineRunner):
    """Submits to Beam's FnApiRunner in a background thread and returns at once."""

    submitted: ClassVar[list[_Detached]] = []

    def run_pipeline(self, pipeline, options):
        outcome: dict = {}
        start = threading.Event()

        def job():
            start.wait()
            try:
                FnApiRunner().run_pipeline(pipeline, options).wait_until_finish()
            except Exception as err:  # handed to whoever waits on the result
                outcome["error"] = err

        thread = threading.Thread(target=job, daemon=True)
        thread.start()
        result = _Detached(thread, start, outcome)
        DetachedRunner.submitted.append(result)
        return result


def _detached_pipeline(*beam_args: str) -> beam.Pipeline:
    DetachedRunner.submitted.clear()
    return beam.Pipeline(runner=DetachedRunner(), options=PipelineOptions(list(beam_args)))


def test_a_launcher_that_does_not_wait_still_gets_a_manifest(tmp_path, tiny_st_dir):
    write_corpus(tmp_path / "in", "txt", GOOD_TEXTS)
    out = tmp_path / "out"
    pipeline = _detached_pipeline("--no_wait_until_finish")
    submitted = run_embed(_argv(tmp_path / "in" / "*.txt", out, tiny_st_dir), pipeline)

    assert isinstance(submitted, embed.EmbedSubmitted)
    assert "DetachedRunner" in submitted.line() and str(out) in submitted.line()
    assert not (out / "_manifest.json").exists()
    # The launcher left the run's marker (its hold on the folder) to the job still running.
    run_id = json.loads((out / "_STARTED").read_text())["run_id"]
    (result,) = DetachedRunner.submitted
    assert result.wait_until_finish() == PipelineState.DONE  # waited on outside the launcher
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["commit"]["run_id"] == run_id
    _check_matches_shards(out, manifest, len(GOOD_TEXTS))


def test_without_no_wait_the_launcher_waits_on_a_detached_runner(tmp_path, tiny_st_dir):
    write_corpus(tmp_path / "in", "txt", GOOD_TEXTS)
    out = tmp_path / "out"
    summary = run_embed(_argv(tmp_path / "in" / "*.txt", out, tiny_st_dir), _detached_pipeline())
    assert isinstance(summary, embed.EmbedSummary)
    assert (summary.read, summary.embedded) == (len(GOOD_TEXTS), len(GOOD_TEXTS))
    assert summary == embed.EmbedSummary.from_manifest(
        str(out), json.loads((out / "_manifest.json").read_text())
    )


def test_a_failing_check_in_the_commit_step_publishes_nothing(tmp_path, tiny_st_dir):
    path, _, _ = write_bad_jsonl(tmp_path / "in")
    out = tmp_path / "out"
    run_embed(_argv(path, out, tiny_st_dir))
    before = (out / "_manifest.json").read_text()
    parts, errors = _parts(out), sorted((out / ERRORS_DIR).iterdir())

    argv = _argv(path, out, tiny_st_dir, "--overwrite", "--max-error-rate", "0.1")
    refused = pytest.raises(CommitRefusedError, match=r"more than --max-error-rate 10\.0%")
    with embed.build(stage_cli.parse("embed", argv)) as job, refused:
        job.pipeline.run().wait_until_finish()
    assert (out / "_manifest.json").read_text() == before
    assert _parts(out) == parts and sorted((out / ERRORS_DIR).iterdir()) == errors
    # The refused run's files stay in its attempt area, unpublished, for a look.
    assert list(out.glob(f"_attempts/*/{ERRORS_DIR}/part-*.parquet"))


def test_the_launcher_raises_the_commit_steps_message_from_worker_processes(tmp_path, tiny_st_dir):
    path, _, _ = write_bad_jsonl(tmp_path / "in")
    out = tmp_path / "out"
    workers = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
    argv = _argv(path, out, tiny_st_dir, "--max-error-rate", "0.1", *workers)
    with pytest.raises(
        JobFailedError, match=r"^\d+ of \d+ rows rejected .* --max-error-rate"
    ) as failure:
        run_embed(argv)
    # The step's own one-line message, not the worker's traceback Beam wraps it in.
    message = str(failure.value)
    assert "Traceback" not in message and "\n" not in message and "while running" not in message
    assert message.endswith(f"the previous content of {out} is unchanged")
    assert not (out / "_manifest.json").exists()


def test_the_local_launcher_prints_the_summary_of_its_manifest(tmp_path, tiny_st_dir, capsys):
    write_corpus(tmp_path / "in", "txt", GOOD_TEXTS)
    out = tmp_path / "out"
    assert stage_cli.main("embed", _argv(tmp_path / "in" / "*.txt", out, tiny_st_dir)) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    manifest = json.loads((out / "_manifest.json").read_text())
    counts = manifest["counts"]
    n = len(GOOD_TEXTS)
    assert re.fullmatch(
        # No rejected row: no pointer at the (empty) errors.
        rf"read {n} rows: {n} embedded, 0 truncated, 0 rejected in \d+\.\ds \(\d+ texts/s\) "
        rf"-> {re.escape(str(out))}",
        printed,
    ), printed
    assert (counts["read"], counts["embedded"], counts["rejected"]) == (n, n, 0)
    assert printed == embed.EmbedSummary.from_manifest(str(out), manifest).line()


def test_a_retried_commit_puts_back_what_an_interrupted_one_moved(tmp_path):
    import os

    from sbert_pipeline.io.output_dir import OutputLayout
    from sbert_pipeline.io.schemas import ERRORS_SCHEMA
    from sbert_pipeline.io.staged_output import prepare_output

    out = tmp_path / "out"
    staged = prepare_output(
        str(out), overwrite=False, job={"command": "test"}, layout=OutputLayout(("", ERRORS_DIR))
    )
    attempt = tmp_path / "out" / "_attempts" / staged.run_id
    (attempt / ERRORS_DIR).mkdir(parents=True)
    names = ["part-00000-of-00002.parquet", "part-00001-of-00002.parquet"]
    for name in names:
        pq.write_table(ERRORS_SCHEMA.empty_table(), attempt / name)
    pq.write_table(ERRORS_SCHEMA.empty_table(), attempt / ERRORS_DIR / names[0])
    # What a worker that died inside the commit leaves: one part already at its final name.
    os.replace(attempt / names[0], out / f"part-{staged.run_id}-00000-of-00002.parquet")

    assert staged.resume() is None
    assert sorted(path.name for path in attempt.glob("part-*.parquet")) == names
    assert not _parts(out)
    manifest = staged.commit({"kind": "test"})
    listed = sorted(entry["path"] for entry in manifest["commit"]["files"])
    assert listed == sorted(
        [f"part-{staged.run_id}-{name.removeprefix('part-')}" for name in names]
        + [f"{ERRORS_DIR}/part-{staged.run_id}-00000-of-00002.parquet"]
    )
    assert [name for name in listed if "/" not in name] == _parts(out)
    # A retry after the commit finished finds this run's manifest and changes nothing.
    assert staged.resume() == manifest == json.loads((out / "_manifest.json").read_text())


def test_the_flex_template_launcher_submits_without_waiting():
    import importlib.util
    from pathlib import Path

    from sbert_pipeline.stage_api.beam_options import pipeline_options
    from sbert_pipeline.stage_api.beam_run import waits

    path = Path(__file__).parents[2] / "deploy" / "dataflow" / "flex-template" / "launch.py"
    spec = importlib.util.spec_from_file_location("flex_template_launch", path)
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    argv = launcher.launcher_argv(
        ["--input=gs://b/in/*.txt", "--output=gs://b/out", "--keep-text=true"]
    )
    assert argv == [
        "--input=gs://b/in/*.txt",
        "--output=gs://b/out",
        "--keep-text",
        "--no_wait_until_finish",
    ]
    assert launcher.launcher_argv(argv) == argv
    beam_args = stage_cli.parse("embed", argv).beam_options
    assert not waits(pipeline_options(beam_args))
    assert waits(pipeline_options([]))
