"""How a model name becomes a folder: the bundled default offline, short Hub names under the
organisation sentence-transformers uses, and messages in the command line's words offline.

Nothing here touches the network: the Hub is offline (``HF_HUB_OFFLINE=1``) or replaced by a
fake ``snapshot_download`` that serves local folders and raises errors named as
huggingface_hub's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sbert_core.errors import ModelLoadError
from sbert_core.model import source
from sbert_core.model.source import (
    CROSS_ENCODERS,
    packaged_default_model_dir,
    resolve_model_dir,
)


class RepositoryNotFoundError(Exception):
    """Named as huggingface_hub's: the Hub has no such repository."""


class GatedRepoError(RepositoryNotFoundError):
    """Named as huggingface_hub's: the repository needs an accepted licence."""


class LocalEntryNotFoundError(FileNotFoundError):
    """Named as huggingface_hub's: offline, and no cached copy."""


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    """A Hub holding the repositories put into the returned dict (id -> folder); every call's
    repo id is recorded in ``asked``."""
    import huggingface_hub

    repos: dict[str, Path] = {}
    asked: list[str] = []

    def snapshot_download(repo_id, local_files_only=False, **_):
        asked.append(repo_id)
        if repo_id in repos:
            return str(repos[repo_id])
        raise RepositoryNotFoundError(f"404 Client Error: Repository Not Found for {repo_id}")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return repos, asked


@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"])
def test_the_bundled_default_resolves_offline_to_the_installed_package(monkeypatch, name):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model_dir(name) == (
        packaged_default_model_dir(),
        "sentence-transformers/all-MiniLM-L6-v2",
    )


def test_a_short_name_is_looked_up_under_sentence_transformers(fake_hub, tiny_st_dir):
    repos, asked = fake_hub
    repos["sentence-transformers/all-mpnet-base-v2"] = tiny_st_dir
    directory, model_id = resolve_model_dir("all-mpnet-base-v2")
    assert (directory, model_id) == (tiny_st_dir, "sentence-transformers/all-mpnet-base-v2")
    assert asked == ["sentence-transformers/all-mpnet-base-v2"]


def test_a_short_name_of_no_organisation_is_looked_up_as_written_next(fake_hub, tiny_bert_dir):
    repos, asked = fake_hub
    repos["bert-base-uncased"] = tiny_bert_dir
    assert resolve_model_dir("bert-base-uncased") == (tiny_bert_dir, "bert-base-uncased")
    assert asked == ["sentence-transformers/bert-base-uncased", "bert-base-uncased"]


def test_a_name_with_an_organisation_is_looked_up_as_written(fake_hub, tiny_st_dir):
    repos, asked = fake_hub
    repos["some-org/some-model"] = tiny_st_dir
    assert resolve_model_dir("some-org/some-model")[1] == "some-org/some-model"
    assert asked == ["some-org/some-model"]


def test_a_short_cross_encoder_name_is_looked_up_under_cross_encoder(fake_hub, tiny_bert_dir):
    repos, asked = fake_hub
    repos["cross-encoder/quora-distilroberta-base"] = tiny_bert_dir
    found = resolve_model_dir("quora-distilroberta-base", organization=CROSS_ENCODERS)
    assert found == (tiny_bert_dir, "cross-encoder/quora-distilroberta-base")
    assert asked == ["cross-encoder/quora-distilroberta-base"]


def test_offline_the_message_speaks_our_flags(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as info:
        resolve_model_dir("all-mpnet-base-v2")
    message = str(info.value)
    assert message.startswith("--model all-mpnet-base-v2: not a local folder, and the Hugging")
    assert "unreachable" in message
    assert "sentence-transformers/all-mpnet-base-v2" in message
    assert "pass a model's folder" in message and "all-MiniLM-L6-v2" in message
    assert "local_files_only" not in message and "HF_HUB_OFFLINE=0" not in message


def test_offline_a_cross_encoder_is_not_offered_the_bundled_bi_encoder(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as info:
        resolve_model_dir("runs/minilm-qqp-cross-encoder", organization=CROSS_ENCODERS)
    message = str(info.value)
    assert message.startswith("--model runs/minilm-qqp-cross-encoder: not a local folder")
    assert "cross-encoder's folder" in message and "kind: cross_encoder" in message
    assert "all-MiniLM-L6-v2" not in message and "local_files_only" not in message


def test_a_network_failure_reads_as_offline(monkeypatch):
    import huggingface_hub

    def snapshot_download(repo_id, **_):
        raise LocalEntryNotFoundError(
            "outgoing traffic has been disabled. To enable repo look-ups and downloads online, "
            "pass 'local_files_only=False' as input."
        )

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(ModelLoadError, match="unreachable") as info:
        resolve_model_dir("all-mpnet-base-v2")
    assert "local_files_only" not in str(info.value)


def test_a_model_the_hub_does_not_have_is_named(fake_hub):
    with pytest.raises(ModelLoadError) as info:
        resolve_model_dir("no-such-model")
    assert "has no model sentence-transformers/no-such-model or no-such-model" in str(info.value)


def test_a_gated_model_says_how_to_get_in(monkeypatch):
    import huggingface_hub

    def snapshot_download(repo_id, **_):
        raise GatedRepoError("401 Client Error: access to this model is restricted")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(ModelLoadError, match=r"some-org/closed on the Hugging Face Hub is gated"):
        resolve_model_dir("some-org/closed")


def test_a_local_folder_is_never_looked_up(fake_hub, tiny_st_dir, tmp_path, monkeypatch):
    _, asked = fake_hub
    monkeypatch.chdir(tiny_st_dir.parent)
    assert resolve_model_dir(tiny_st_dir.name)[0] == tiny_st_dir.resolve()
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model_dir(str(tmp_path / "nowhere"))
    assert asked == []


def test_the_hub_candidates_are_the_documented_order():
    assert source.hub_candidates("x") == ["sentence-transformers/x", "x"]
    assert source.hub_candidates("x", CROSS_ENCODERS) == ["cross-encoder/x", "x"]
    assert source.hub_candidates("org/x") == ["org/x"]


def test_a_hub_cross_encoder_loads_by_id(fake_hub, tmp_path):
    """A cross-encoder as the Hub stores it (a plain sequence classifier folder) loads by id."""
    import torch
    from testdata import build_tiny_bert
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

    from sbert_core import CrossEncoder

    base = build_tiny_bert(tmp_path / "base")
    config = AutoConfig.from_pretrained(base, num_labels=1)
    torch.manual_seed(0)
    folder = tmp_path / "hub-copy"
    AutoModelForSequenceClassification.from_config(config).eval().save_pretrained(folder)
    AutoTokenizer.from_pretrained(base).save_pretrained(folder)
    repos, _ = fake_hub
    repos["cross-encoder/tiny-reranker"] = folder
    model = CrossEncoder.load("cross-encoder/tiny-reranker", device="cpu")
    assert model.model_id == "cross-encoder/tiny-reranker"
    assert model.predict([("a man plays", "someone plays music")]).shape == (1,)
