"""The query encoder of a search: the index's model (or another copy of it), set up as the
embed stage set it up, with the query prompt."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sbert_pipeline.index.files import LoadedIndex
from sbert_pipeline.io.embeddings import require_compatible
from sbert_pipeline.search.options import Options
from sbert_pipeline.stage_api.model_options import query_encoder_settings

from sbert_core import SentenceEncoder


@dataclass(frozen=True)
class QueryEncoder:
    """The query model and how ``encode`` is called for queries (prompt, batching)."""

    encoder: SentenceEncoder
    encode_kwargs: dict[str, Any]

    def encode(self, queries: list[str]):
        """Query vectors, ``(N, dim)`` float32, as the index's vectors were made."""
        return self.encoder.encode(queries, **self.encode_kwargs)


def load_query_encoder(options: Options, loaded: LoadedIndex) -> QueryEncoder:
    """The index's model (or ``--model``), set up exactly as the embed job was, with the
    query prompt (:func:`query_prompt`).

    Raises:
        ValueError: ``--truncate-dim`` other than the index's, or an unknown prompt name.
        IncompatibleEmbeddingsError: ``--model`` is not the model the index was built with.
    """
    embedded = loaded.embeddings_manifest
    settings = query_encoder_settings(options, embedded)
    if settings.truncate_dim != embedded.get("truncate_dim"):
        raise ValueError(
            f"--truncate-dim {settings.truncate_dim}: the index {options.index} holds "
            f"{embedded.get('dim')}-dimensional vectors (truncate_dim "
            f"{embedded.get('truncate_dim')}); queries must keep the same dimensions"
        )
    settings.validate()
    encoder = settings.load()
    # The copy must make the corpus's vectors: described with the corpus's prompt.
    corpus_side = replace(settings, prompt_name=None, prompt=embedded.get("prompt", ""))
    require_compatible(
        embedded, corpus_side.describe(encoder), f"the index {options.index} and the query model"
    )
    kwargs = settings.encode_kwargs()
    if settings.prompt_name is None and settings.prompt is None:
        kwargs["prompt"] = query_prompt(encoder, embedded)
    encoder.prompts.resolve(kwargs.get("prompt_name"), kwargs.get("prompt"))  # a bad name fails now
    return QueryEncoder(encoder, kwargs)


def query_prompt(encoder: SentenceEncoder, embedded: dict) -> str:
    """The prompt queries get when none is asked for: the model's ``query`` prompt when the
    corpus was embedded with its ``document`` prompt (sentence-transformers' ``encode_query``
    against ``encode_document``; a model without prompts has both empty), else the corpus's
    own prompt, so that queries and corpus are embedded alike."""
    corpus_prompt = embedded.get("prompt", "")  # manifests from before prompts had none
    if corpus_prompt == encoder.prompts.prompts["document"]:
        return encoder.prompts.resolve(task="query")
    return corpus_prompt
