import json

import pytest

from sbert_core import ModelLoadError
from sbert_core.model.prompts import PromptSettings

SETTINGS = PromptSettings({"query": "query: ", "passage": "passage: "}, "passage")


def test_every_model_has_query_and_document_names():
    assert PromptSettings().prompts == {"document": "", "query": ""}
    assert SETTINGS.prompts == {"document": "", "passage": "passage: ", "query": "query: "}


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, "passage: "),  # the default prompt
        ({"prompt_name": "query"}, "query: "),
        ({"prompt": "Represent this: "}, "Represent this: "),
        ({"prompt": ""}, ""),  # an explicit empty prompt beats the default
        ({"task": "query"}, "query: "),
        # sentence-transformers' encode_document takes "document", which every model has (empty
        # here), before looking at "passage": the default does not apply either.
        ({"task": "document"}, ""),
        ({"task": "query", "prompt_name": "passage"}, "passage: "),
    ],
)
def test_resolution_follows_sentence_transformers(kwargs, expected):
    assert SETTINGS.resolve(**kwargs) == expected


def test_resolution_matches_sentence_transformers_itself(tiny_st_dir, tmp_path):
    # The oracle's own choice, read off the texts it would prepend.
    import shutil

    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "m"
    shutil.copytree(tiny_st_dir, folder)
    config_file = folder / "config_sentence_transformers.json"
    config = json.loads(config_file.read_text())
    config.update(
        prompts={"query": "query: ", "passage": "passage: "}, default_prompt_name="passage"
    )
    config_file.write_text(json.dumps(config))
    oracle = SentenceTransformer(str(folder), device="cpu")
    ours = PromptSettings.read(folder)
    assert ours.prompts == oracle.prompts
    assert ours.resolve() == oracle._resolve_prompt(None, None)
    assert ours.resolve(prompt_name="query") == oracle._resolve_prompt(None, "query")


def test_bad_requests_are_refused():
    with pytest.raises(ValueError, match=r"unknown prompt name 'nope'.*'passage'"):
        SETTINGS.resolve(prompt_name="nope")
    with pytest.raises(ValueError, match="not both"):
        SETTINGS.resolve(prompt_name="query", prompt="x")
    with pytest.raises(ValueError, match="unknown task"):
        SETTINGS.resolve(task="search")


def test_config_file_is_checked(tmp_path):
    assert PromptSettings.read(tmp_path) == PromptSettings()
    path = tmp_path / "config_sentence_transformers.json"
    path.write_text(json.dumps({"prompts": {"query": "q: "}, "default_prompt_name": "missing"}))
    with pytest.raises(ModelLoadError, match="default_prompt_name 'missing'"):
        PromptSettings.read(tmp_path)
    path.write_text(json.dumps({"prompts": ["q: "]}))
    with pytest.raises(ModelLoadError, match="must map names"):
        PromptSettings.read(tmp_path)
    path.write_text("{")
    with pytest.raises(ModelLoadError, match="unreadable JSON"):
        PromptSettings.read(tmp_path)
    path.write_text(json.dumps({"prompts": {"query": None}}))
    assert PromptSettings.read(tmp_path).prompts["query"] == ""
