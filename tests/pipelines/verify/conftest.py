"""Fixtures of the verify stage's tests (the data in ``verify_data.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from verify_data import build_cross_encoder, embed_and_pair


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory) -> Path:
    return build_cross_encoder(tmp_path_factory.mktemp("verify_ce") / "ce")


@pytest.fixture(scope="session")
def pairs_dir(tmp_path_factory, tiny_st_dir) -> Path:
    """A pairs folder whose embeddings kept their texts."""
    return embed_and_pair(tmp_path_factory.mktemp("verify_pairs"), tiny_st_dir)
