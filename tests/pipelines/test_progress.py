"""Progress of the long local loops (pipelines/vectors/progress.py) and the stages that report it.

The plain mode runs on a fake clock (no sleeping); the terminal mode writes tqdm's bar to a
fake terminal stream. Stage tests turn progress on with a zero interval, so every update is a
line, and check the stage's own loop reported its units.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading

import numpy as np
import pyarrow as pa
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from corpus_files import GOOD_TEXTS, write_corpus
from sbert_pipeline.stage_api.beam_run import show_progress
from sbert_pipeline.vectors.progress import (
    EMBED_PROGRESS,
    Progress,
    close_shared_progress,
    enable_progress,
    progress_enabled,
    shared_progress,
    stage_progress,
)


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal, as stderr on a console does."""

    def isatty(self) -> bool:
        return True


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def progress_off():
    """Each test starts and ends with progress off (it is per process state)."""
    enable_progress(False)
    yield
    enable_progress(False)


@pytest.fixture
def lines():
    """Progress on, one plain line per update; returns the lines written so far."""
    stream = io.StringIO()
    enable_progress(True, stream=stream, interval=0.0, clock=FakeClock())
    return lambda: stream.getvalue().splitlines()


def test_plain_lines_every_30_seconds_with_count_rate_and_eta():
    clock, stream = FakeClock(), io.StringIO()
    bar = Progress("embed", total=1000, unit="texts", stream=stream, clock=clock)
    bar.start()
    for seconds, done in [(10, 100), (20, 100), (30, 100), (45, 100), (60, 100), (89, 100)]:
        clock.now = 1000.0 + seconds
        bar.update(done)
    bar.close()
    assert stream.getvalue().splitlines() == [
        "embed: 300/1,000 texts (30.0%), 10 texts/s, ETA 1m10s",
        "embed: 500/1,000 texts (50.0%), 8.3 texts/s, ETA 1m00s",
    ]


def test_plain_lines_without_a_total_show_count_and_rate_only():
    clock, stream = FakeClock(), io.StringIO()
    bar = Progress("pairs", unit="tiles", stream=stream, clock=clock, interval=5)
    with bar:
        for _ in range(12):
            clock.now += 1
            bar.update(250)
    assert stream.getvalue().splitlines() == [
        "pairs: 1,250 tiles, 250 tiles/s",
        "pairs: 2,500 tiles, 250 tiles/s",
    ]


def test_a_terminal_gets_a_tqdm_bar_with_rate_and_eta():
    stream = FakeTerminal()
    with Progress("k-means", total=4, unit="iterations", stream=stream) as bar:
        assert "k-means:   0%" in stream.getvalue()  # drawn when the loop starts
        for _ in range(4):
            bar.update()
    shown = stream.getvalue()
    assert "\r" in shown and shown.endswith("\n")  # redrawn in place, left on its line at the end
    assert "k-means: 100%" in shown and "4/4" in shown
    assert "iterations/s" in shown and "<00:00" in shown  # rate and remaining time


def test_a_bar_closes_when_its_count_reaches_its_total():
    stream = FakeTerminal()
    bar = Progress("index", total=3, unit="vectors", stream=stream)
    bar.start()
    bar.update(3)
    assert stream.getvalue().endswith("\n") and "3/3" in stream.getvalue()
    after = stream.getvalue()
    bar.update(1)  # past the end: counted, not drawn
    bar.close()
    assert bar.count == 4 and stream.getvalue() == after


def test_updates_from_threads_all_count():
    bar = Progress("pairs", total=8000, stream=io.StringIO(), interval=1e9)
    workers = [
        threading.Thread(target=lambda: [bar.update() for _ in range(1000)]) for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert bar.count == 8000


def test_off_unless_a_job_turns_it_on(capsys):
    assert not progress_enabled()
    bar = stage_progress("k-means", total=3)
    with bar:
        bar.update(3)
    assert not bar.enabled and capsys.readouterr().err == ""


def test_off_in_another_process(monkeypatch):
    enable_progress(True, stream=io.StringIO())
    assert progress_enabled()
    pid = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: pid + 1)  # a forked worker sees this state
    assert not progress_enabled() and not shared_progress(EMBED_PROGRESS, "texts").enabled


@pytest.fixture
def root_level():
    """Sets the root log level (as -v/--quiet do); restores it and the stages' logger after."""
    root, stages = logging.getLogger(), logging.getLogger("sbert_pipeline")
    before = root.level, stages.level
    yield root.setLevel
    root.setLevel(before[0])
    stages.setLevel(before[1])


def test_show_progress_on_a_local_runner_or_in_process(root_level):
    root_level(logging.WARNING)
    show_progress(PipelineOptions(["--runner", "FnApiRunner"]))
    assert progress_enabled()
    enable_progress(False)
    show_progress()
    assert progress_enabled()


def test_show_progress_is_off_under_quiet(root_level):
    root_level(logging.ERROR)  # what `sbert --quiet` sets
    show_progress(PipelineOptions(["--runner", "FnApiRunner"]))
    assert not progress_enabled()
    show_progress()
    assert not progress_enabled()


def test_show_progress_is_off_on_a_remote_runner(root_level):
    root_level(logging.WARNING)
    show_progress(PipelineOptions(["--runner", "DataflowRunner"]))
    assert not progress_enabled()


def test_shared_bar_is_one_per_process_and_grows_its_total(lines):
    bar = shared_progress(EMBED_PROGRESS, "texts")
    bar.add_total(5)
    shared_progress(EMBED_PROGRESS, "texts").add_total(3)
    bar.start()
    shared_progress(EMBED_PROGRESS, "texts").update(2)
    assert bar.total == 8 and lines() == ["embed: 2/8 texts (25.0%), 0 texts/s"]
    close_shared_progress()
    assert shared_progress(EMBED_PROGRESS, "texts") is not bar  # a new run starts afresh


# --- the stages ---------------------------------------------------------------------------


def _planted(n: int = 300, dim: int = 16) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)


def _counts(shown: list[str], description: str) -> list[str]:
    return [
        line.split(": ", 1)[1].split(" ", 1)[0] for line in shown if line.startswith(description)
    ]


def test_kmeans_reports_its_iterations(lines):
    from sbert_pipeline.vectors.kmeans import fit_spherical_kmeans

    fit = fit_spherical_kmeans(_planted(), 4, iterations=6, tolerance=0.0)
    counts = _counts(lines(), "k-means:")
    assert counts == [f"{i}/6" for i in range(1, fit.iterations + 1)]


def test_exact_pairs_scan_reports_its_tiles(lines):
    from sbert_pipeline.vectors.allpairs import self_topk

    self_topk(_planted(), 5, block_size=64)
    counts = _counts(lines(), "pairs:")
    total = counts[-1].split("/")[1]
    assert len(counts) == int(total) > 1 and counts[-1] == f"{total}/{total}"


def test_exact_pairs_ranges_report_on_one_bar(lines, tmp_path):
    from sbert_pipeline.pairs.exact_transforms import _SearchRangeFn, plan_ranges
    from sbert_pipeline.pairs.transforms import PairsSettings

    vectors = _planted(120)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    class Reader:
        def load_sorted(self):
            return pa.array([f"{i:04d}" for i in range(len(vectors))]), vectors

    ranges = list(enumerate(plan_ranges(len(vectors), 3)))
    settings = PairsSettings(str(tmp_path), Reader(), 3, None, "float32")
    for bundle in (ranges[:2], ranges[2:]):  # one DoFn instance per bundle
        search = _SearchRangeFn(settings, len(ranges))
        search.setup()
        for item in bundle:
            list(search.process(item))
    assert _counts(lines(), "pairs (query ranges):") == ["1/3", "2/3", "3/3"]


def test_index_build_reports_vectors_added(lines):
    from sbert_pipeline.index.build import ArraySource, BuildSettings, build_index

    vectors = _planted(2000)
    built = build_index(ArraySource(vectors), BuildSettings("Flat", batch_size=500, n_queries=100))
    counts = _counts(lines(), "index fill:")
    added = len(vectors) - len(built.held_out)
    assert counts[-1] == f"{added:,}/{added:,}" and len(counts) == 4


def test_embed_handler_counts_texts_and_the_reader_the_total(lines, tmp_path, tiny_st_dir):
    from sbert_pipeline.embed.model_handler import SbertModelHandler
    from sbert_pipeline.embed.read_corpus import _ReadFileFn
    from sbert_pipeline.io.corpus_reader import CorpusRecord, CorpusSpec

    from sbert_core.inference.encoder_settings import EncoderSettings

    path = write_corpus(tmp_path, "txt", GOOD_TEXTS[:5])
    read = list(_ReadFileFn(CorpusSpec()).process((str(path), "corpus", path.stat().st_size)))
    records = [item for item in read if isinstance(item, CorpusRecord)]
    # Two texts per forward pass: the bar moves inside each batch the handler is given.
    handler = SbertModelHandler(EncoderSettings(model=str(tiny_st_dir), batch_size=2))
    model = handler.load_model()
    handler.run_inference(records[:3], model)
    handler.run_inference(records[3:], model)
    assert _counts(lines(), "embed:") == ["2/5", "3/5", "5/5"]


def test_embed_handler_counts_a_batch_whose_model_ran_elsewhere(lines, tiny_encoder):
    """A model shared by a GPU worker's processes runs in another one: no forward pass is seen
    here, so the finished batch is counted whole."""
    from sbert_pipeline.embed.model_handler import SbertModelHandler

    handler = SbertModelHandler("unused")
    handler.run_inference(GOOD_TEXTS[:4], tiny_encoder)  # loaded elsewhere: no forward hook
    assert _counts(lines(), "embed:") == ["4"]


def test_embed_job_draws_the_bar_to_its_end(tmp_path, tiny_st_dir, monkeypatch, root_level):
    from tests.stage_commands import embed as run

    root_level(logging.WARNING)
    terminal = FakeTerminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    write_corpus(tmp_path / "in", "txt", GOOD_TEXTS)
    argv = ["--input", str(tmp_path / "in" / "*.txt"), "--output", str(tmp_path / "out")]
    summary = run([*argv, "--model", str(tiny_st_dir)])
    n = len(GOOD_TEXTS)
    assert summary.embedded == n
    assert "embed: 100%" in terminal.getvalue() and f"{n}/{n}" in terminal.getvalue()


@pytest.mark.parametrize("method", ["star", "average"])
def test_dedup_sweep_reports_each_threshold(lines, method):
    from sbert_pipeline.grouping.methods import sweep_groupings
    from sbert_pipeline.grouping.pairs import IndexedPairs

    pairs = IndexedPairs(
        np.array([0, 1, 3], np.int64), np.array([1, 2, 4], np.int64), np.float32([0.9, 0.8, 0.95])
    )
    rank = np.arange(6)
    thresholds = [0.75, 0.85, 0.9]
    groupings = list(sweep_groupings(method, 6, pairs, thresholds, lambda t: rank))
    assert len(groupings) == 3
    assert _counts(lines(), f"dedup sweep ({method}):") == ["1/3", "2/3", "3/3"]
