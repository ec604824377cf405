"""Item 4 of issue 13 (inference part): a failure that is not the rows' stops the job.

When inference fails the same way for every text (a model that cannot run on its device, a bad
token budget), the job stops with that error and publishes nothing, instead of dead-lettering
every row. A text that fails alone (one bad row) stays a dead letter, also when its whole batch
failed, and also when the failing batch comes among good ones.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from garbage_helpers import embed_argv, texts, write_txt
from sbert_pipeline.embed.model_handler import (
    DETERMINISTIC_ROWS,
    DeterministicInferenceError,
    Embedding,
    EncoderSettings,
    InferenceFailure,
    SbertModelHandler,
)
from sbert_pipeline.io.corpus_reader import CorpusRecord
from sbert_pipeline.jobs.cli import main as cli
from sbert_pipeline.stage_api.stops import JobFailedError

from sbert_core import SentenceEncoder
from sbert_core.inference.encode_result import EncodeResult
from tests.stage_commands import embed

DEVICE_ERROR = "CUDA error: no kernel image is available for execution on the device"


class StubEncoder:
    """Encodes to ones, except that ``error(text)`` (when not None) is raised for a text."""

    def __init__(self, error) -> None:
        self.error = error
        self.calls: list[int] = []  # texts per call

    def encode_detailed(self, texts, token_budget=None) -> EncodeResult:
        self.calls.append(len(texts))
        for text in texts:
            message = self.error(text)
            if message is not None:
                raise RuntimeError(message)
        n = len(texts)
        return EncodeResult(np.ones((n, 4), np.float32), np.full(n, 3, np.int32), np.zeros(n, bool))


def _records(names: list[str]) -> list[CorpusRecord]:
    return [CorpusRecord(name, name, f"corpus.txt:{row}") for row, name in enumerate(names)]


def _handler() -> SbertModelHandler:
    return SbertModelHandler(EncoderSettings(model="unused"))


def _kinds(results) -> list[str]:
    return ["ok" if isinstance(r.inference, Embedding) else "dead" for r in results]


def test_the_same_exception_for_every_text_stops_without_trying_every_row():
    encoder = StubEncoder(lambda text: DEVICE_ERROR)
    with pytest.raises(DeterministicInferenceError, match="CUDA error: no kernel image"):
        _handler().run_inference(_records([f"t{i}" for i in range(500)]), encoder)
    # One batch call, then the first rows alone: not 500 single-row retries.
    assert encoder.calls == [500] + [1] * DETERMINISTIC_ROWS


def test_one_bad_text_in_a_failing_batch_is_a_dead_letter():
    encoder = StubEncoder(lambda text: "bad token" if text == "t3" else None)
    results = _handler().run_inference(_records([f"t{i}" for i in range(10)]), encoder)
    assert _kinds(results) == ["ok"] * 3 + ["dead"] + ["ok"] * 6
    assert results[3].inference == InferenceFailure("inference failed: RuntimeError: bad token")


def test_bad_first_rows_are_dead_letters_when_later_rows_embed():
    bad = {f"t{i}" for i in range(DETERMINISTIC_ROWS - 1)}
    encoder = StubEncoder(lambda text: "unsupported character" if text in bad else None)
    results = _handler().run_inference(_records([f"t{i}" for i in range(8)]), encoder)
    assert _kinds(results) == ["dead"] * len(bad) + ["ok"] * (8 - len(bad))


def test_a_failing_batch_among_good_ones_still_dead_letters_its_rows():
    handler = _handler()
    good = StubEncoder(lambda text: None)
    assert _kinds(handler.run_inference(_records(["a", "b"]), good)) == ["ok", "ok"]
    # Every row of the next batch fails identically, but rows have embedded before: their own
    # texts are at fault (a corrupt stretch of the corpus), so they are dead letters.
    failing = StubEncoder(lambda text: "text too strange" if text.startswith("x") else None)
    batch = _records([f"x{i}" for i in range(20)])
    assert _kinds(handler.run_inference(batch, failing)) == ["dead"] * 20
    assert _kinds(handler.run_inference(_records(["c"]), failing)) == ["ok"]


def test_rows_failing_each_in_their_own_way_are_dead_letters():
    encoder = StubEncoder(lambda text: f"cannot read {text!r}")
    results = _handler().run_inference(_records([f"t{i}" for i in range(12)]), encoder)
    assert _kinds(results) == ["dead"] * 12


def test_embed_stops_and_keeps_the_previous_output(tiny_st_dir, tmp_path, monkeypatch, capsys):
    corpus = write_txt(tmp_path / "in", texts(40))
    out = tmp_path / "emb"
    embed(embed_argv(corpus, out, tiny_st_dir))
    before = (out / "_manifest.json").read_text()

    def encode_detailed(self, texts, **kwargs):  # a model that cannot run on its device
        raise RuntimeError(DEVICE_ERROR)

    monkeypatch.setattr(SentenceEncoder, "encode_detailed", encode_detailed)
    with pytest.raises(JobFailedError, match=r"fails the same way whatever the text.*CUDA error"):
        embed(embed_argv(corpus, out, tiny_st_dir, "--overwrite"))
    assert (out / "_manifest.json").read_text() == before
    assert json.loads(before)["counts"]["embedded"] == 40

    fresh = tmp_path / "fresh"
    assert cli(["embed", *embed_argv(corpus, fresh, tiny_st_dir)]) == 1
    err = capsys.readouterr().err
    assert "sbert: job failed: inference fails the same way whatever the text" in err
    assert "nothing was published" in err and "Traceback" not in err
    assert not (fresh / "_manifest.json").exists()
