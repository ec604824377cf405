"""Which ``transformers`` class runs a model's ``config.json``, as sentence-transformers picks it.

Encoder models (BERT, RoBERTa, XLM-RoBERTa, MPNet, DistilBERT, DeBERTa-v2, ModernBERT, ELECTRA,
...) and decoder models (Qwen2, Qwen3, Llama, Mistral, Gemma, ...) run through ``AutoModel``:
their last hidden states are the token embeddings. For T5-family encoder-decoders only the
encoder runs (``T5EncoderModel``), as in sentence-t5 and GTR. Other encoder-decoder models are
refused: sentence-transformers has a special case for each, and ``AutoModel`` would run their
decoder.
"""

from __future__ import annotations

from pathlib import Path

from sbert_core.errors import ModelLoadError

# model_type -> encoder class, the T5 family of sentence-transformers' encoder-only registry.
ENCODER_ONLY = {
    "t5": "T5EncoderModel",
    "mt5": "MT5EncoderModel",
    "umt5": "UMT5EncoderModel",
}
# Architectures with a parity test against sentence-transformers (tests/sbert_core).
TESTED_MODEL_TYPES = (
    "bert",
    "roberta",
    "xlm-roberta",
    "mpnet",
    "distilbert",
    "deberta-v2",
    "modernbert",
    "electra",
    "t5",
    "qwen2",
    "qwen3",
)


def transformer_class(config, source: Path | str = "config.json"):
    """The class whose ``from_pretrained``/``from_config`` builds the model of ``config``.

    Raises:
        ModelLoadError: an encoder-decoder architecture other than the T5 family.
    """
    import transformers

    model_type = str(getattr(config, "model_type", ""))
    if model_type in ENCODER_ONLY:
        return getattr(transformers, ENCODER_ONLY[model_type])
    if getattr(config, "is_encoder_decoder", False):
        raise ModelLoadError(
            f"{source}: encoder-decoder architecture {model_type!r} is not supported (of the "
            f"encoder-decoders, only the encoders of {', '.join(ENCODER_ONLY)} run)"
        )
    return transformers.AutoModel


def build_from_config(config, source: Path | str = "config.json"):
    """An untrained model of ``config``'s architecture (call it under ``torch.device("meta")`` to
    allocate nothing), built by the class :func:`transformer_class` picks."""
    import transformers

    cls = transformer_class(config, source)
    if cls is transformers.AutoModel:
        return cls.from_config(config, trust_remote_code=False)
    return cls(config)


def check_plain_folder_tokenizer(tokenizer, source: Path | str) -> None:
    """Refuse a plain Hugging Face folder (no ``modules.json``) whose tokenizer has a chat template.

    sentence-transformers renders every text of such a folder through the chat template (as a
    user message) before tokenising; this encoder tokenises the text itself. A folder saved by
    sentence-transformers records the text format it uses, and is accepted.

    Raises:
        ModelLoadError: naming the folder and what to do instead.
    """
    if getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(
            f"{source}: this Hugging Face folder has no modules.json and its tokenizer has a chat "
            "template, which sentence-transformers applies to every text; such folders are not "
            "supported (save it as a sentence-transformers model with a text-only Transformer)"
        )
