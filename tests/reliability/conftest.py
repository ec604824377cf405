"""Fixtures shared by the output-folder reliability tests: a small text corpus and its
embeddings (built once per test module)."""

from __future__ import annotations

import pytest
from output_folders_helpers import CORPUS_TEXTS, embed_argv, texts, write_txt

from tests.stage_commands import embed


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """``corpus.txt`` of :data:`CORPUS_TEXTS` distinct short texts."""
    return write_txt(tmp_path_factory.mktemp("corpus"), texts(CORPUS_TEXTS))


@pytest.fixture(scope="module")
def embedded(corpus, tiny_st_dir, tmp_path_factory):
    """A complete ``sbert embed`` output of :func:`corpus` with the tiny model."""
    out = tmp_path_factory.mktemp("embedded") / "out"
    embed(embed_argv(corpus, out, tiny_st_dir))
    return out
