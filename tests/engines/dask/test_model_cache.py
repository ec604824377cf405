"""The process's model cache: a Dask worker sets a DoFn up for every partition, and loads its
model once all the same (per process, per settings, while among the last two used)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
from sbert_pipeline.stage_api import model_cache
from sbert_pipeline.stage_api.model_cache import MAX_MODELS, cached_model


@dataclass(frozen=True)
class Settings:
    model: str
    dtype: str = "float32"


@pytest.fixture(autouse=True)
def empty_cache():
    model_cache.clear_models()
    yield
    model_cache.clear_models()


def loader(loads: list):
    def load():
        loads.append(1)
        return object()

    return load


def test_the_same_settings_load_once_and_other_settings_load_their_own(tmp_path):
    loads: list = []
    first = cached_model(Settings("m"), "m", loader(loads))
    assert cached_model(Settings("m"), "m", loader(loads)) is first
    assert cached_model(Settings("m", "int8"), "m", loader(loads)) is not first
    assert len(loads) == 2


def test_at_most_two_models_are_kept_the_one_used_longest_ago_goes(tmp_path):
    loads: list = []
    a = cached_model(Settings("a"), "a", loader(loads))
    cached_model(Settings("b"), "b", loader(loads))
    assert cached_model(Settings("a"), "a", loader(loads)) is a  # a is now the newest
    cached_model(Settings("c"), "c", loader(loads))  # b goes
    assert MAX_MODELS == 2 and len(loads) == 3
    assert cached_model(Settings("a"), "a", loader(loads)) is a
    cached_model(Settings("b"), "b", loader(loads))
    assert len(loads) == 4


def test_a_model_directory_rewritten_in_place_is_loaded_again(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(b"1234")
    loads: list = []
    settings = Settings(str(folder))
    first = cached_model(settings, str(folder), loader(loads))
    assert cached_model(settings, str(folder), loader(loads)) is first
    (folder / "weights.bin").write_bytes(b"12345")  # a fine-tuned model written again
    os.utime(folder / "weights.bin", ns=(1, 1))
    assert cached_model(settings, str(folder), loader(loads)) is not first
    assert len(loads) == 2
