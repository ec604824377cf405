"""Tiny random models of every architecture the encoder supports, built offline from configs.

Each builder writes a Hugging Face folder (config, safetensors weights, tokenizer) with random
weights: hidden size 32, 2 layers. Tokenizers are trained here with the ``tokenizers`` library on
a few dozen words (WordPiece, byte-level BPE or Unigram, as the real models use) and wrapped in
the architecture's own tokenizer class, so nothing is downloaded. :func:`st_folder` wraps such a
folder as a sentence-transformers model saved by that library (the oracle's own format).
"""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from pathlib import Path

from testdata import SAMPLE_TEXTS, build_tiny_bert

HIDDEN = 32
MAX_POSITIONS = 64
_WORDS = (
    "the a an is are was of to and in on with for man woman dog cat plays playing guitar music "
    "runs running eats food red blue green car road sky sun rain house tree question answer "
    "how what why where who when do does can i you we they it this that query passage document"
).split()
_CORPUS = [" ".join(_WORDS[i : i + 7]) for i in range(0, len(_WORDS), 2)]
_CORPUS += [text.capitalize() + "." for text in _CORPUS] + list(string.punctuation + string.digits)

# Texts for parity checks: short, long (past the 48-token limit of st_folder), punctuation, case.
TEXTS = [
    *SAMPLE_TEXTS,
    "where is the house with the green tree",
    "what does this question answer",
]


def _base_config(**overrides) -> dict:
    return {
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "max_position_embeddings": MAX_POSITIONS,
        **overrides,
    }


def _trained(model, trainer, pre_tokenizer=None, normalizer=None):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer(model)
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    if pre_tokenizer is not None:
        tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.train_from_iterator(_CORPUS, trainer)
    return tokenizer


def _wordpiece_vocab(specials: list[str]) -> dict[str, int]:
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    tokenizer = _trained(
        models.WordPiece(unk_token=specials[1] if "[UNK]" in specials else "<unk>"),
        trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials),
        pre_tokenizers.BertPreTokenizer(),
        normalizers.BertNormalizer(lowercase=True),
    )
    return tokenizer.get_vocab()


def _bpe_vocab(specials: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    from tokenizers import models, pre_tokenizers, trainers

    tokenizer = _trained(
        models.BPE(),
        trainers.BpeTrainer(
            vocab_size=320,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    )
    model = json.loads(tokenizer.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return model["vocab"], merges


def _unigram_vocab(specials: list[str], unk: str) -> list[tuple[str, float]]:
    from tokenizers import models, pre_tokenizers, trainers

    tokenizer = _trained(
        models.Unigram(),
        trainers.UnigramTrainer(vocab_size=200, special_tokens=specials, unk_token=unk),
        pre_tokenizers.Metaspace(),
    )
    pieces = json.loads(tokenizer.to_str())["model"]["vocab"]
    return [(piece, float(score)) for piece, score in pieces]


def _save(directory: Path, model, tokenizer) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.model_max_length = MAX_POSITIONS
    tokenizer.save_pretrained(directory)
    model.eval().save_pretrained(directory)
    return directory


def _roberta_like(directory: Path, config_cls, model_cls, tokenizer_cls, unigram: bool) -> Path:
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    if unigram:
        vocab = _unigram_vocab(specials, "<unk>")
        tokenizer = tokenizer_cls(vocab=vocab)
        size = len(vocab)
    else:
        vocab, merges = _bpe_vocab(specials)
        tokenizer = tokenizer_cls(vocab=vocab, merges=merges)
        size = len(vocab)
    # RoBERTa-family positions start after the padding index, hence the two extra positions.
    config = config_cls(
        vocab_size=size,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        type_vocab_size=1,
        **_base_config(max_position_embeddings=MAX_POSITIONS + 2),
    )
    return _save(directory, model_cls(config), tokenizer)


def build_bert(directory: Path) -> Path:
    """BERT (the packaged tiny WordPiece vocabulary of tests/testdata.py)."""
    return build_tiny_bert(directory, hidden=HIDDEN, max_positions=MAX_POSITIONS)


def build_roberta(directory: Path) -> Path:
    """RoBERTa with a byte-level BPE tokenizer."""
    from transformers import RobertaConfig, RobertaModel, RobertaTokenizer

    return _roberta_like(directory, RobertaConfig, RobertaModel, RobertaTokenizer, unigram=False)


def build_xlm_roberta(directory: Path) -> Path:
    """XLM-RoBERTa with a Unigram (SentencePiece-style) tokenizer."""
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizer

    return _roberta_like(
        directory, XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizer, unigram=True
    )


def build_mpnet(directory: Path) -> Path:
    """MPNet with its WordPiece tokenizer (``<s>``/``</s>`` specials, padding id 1)."""
    from transformers import MPNetConfig, MPNetModel, MPNetTokenizer

    vocab = _wordpiece_vocab(["<s>", "<pad>", "</s>", "<unk>", "<mask>", "[UNK]"])
    tokenizer = MPNetTokenizer(vocab=vocab, unk_token="[UNK]")
    config = MPNetConfig(
        vocab_size=len(vocab),
        pad_token_id=1,
        **_base_config(max_position_embeddings=MAX_POSITIONS + 2),
    )
    return _save(directory, MPNetModel(config), tokenizer)


def build_distilbert(directory: Path) -> Path:
    """DistilBERT (its own config names: dim, n_layers, n_heads, hidden_dim)."""
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizer

    vocab = _wordpiece_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer = DistilBertTokenizer(vocab=vocab)
    config = DistilBertConfig(
        vocab_size=len(vocab),
        dim=HIDDEN,
        n_layers=2,
        n_heads=4,
        hidden_dim=64,
        max_position_embeddings=MAX_POSITIONS,
    )
    return _save(directory, DistilBertModel(config), tokenizer)


def build_electra(directory: Path) -> Path:
    """ELECTRA discriminator with a 16-d embedding projected to the 32-d hidden size."""
    from transformers import BertTokenizer, ElectraConfig, ElectraModel

    vocab = _wordpiece_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer = BertTokenizer(vocab=vocab)
    config = ElectraConfig(vocab_size=len(vocab), embedding_size=16, **_base_config())
    return _save(directory, ElectraModel(config), tokenizer)


def build_deberta_v2(directory: Path) -> Path:
    """DeBERTa-v3-style DeBERTa-v2: relative attention, no absolute positions, Unigram vocab."""
    from transformers import DebertaV2Config, DebertaV2Model, DebertaV2Tokenizer

    vocab = _unigram_vocab(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"], "[UNK]")
    tokenizer = DebertaV2Tokenizer(vocab=vocab)
    config = DebertaV2Config(
        vocab_size=len(vocab),
        pad_token_id=0,
        type_vocab_size=0,
        relative_attention=True,
        position_biased_input=False,
        pos_att_type=["p2c", "c2p"],
        position_buckets=16,
        max_relative_positions=-1,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        **_base_config(),
    )
    return _save(directory, DebertaV2Model(config), tokenizer)


def build_modernbert(directory: Path) -> Path:
    """ModernBERT (rotary, alternating local/global attention) with a BPE tokenizer."""
    from tokenizers import processors
    from transformers import ModernBertConfig, ModernBertModel, PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab, merges = _bpe_vocab(specials)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    config = ModernBertConfig(
        vocab_size=len(vocab),
        pad_token_id=vocab["[PAD]"],
        cls_token_id=vocab["[CLS]"],
        sep_token_id=vocab["[SEP]"],
        bos_token_id=vocab["[CLS]"],
        eos_token_id=vocab["[SEP]"],
        global_attn_every_n_layers=2,
        local_attention=8,
        reference_compile=False,
        **_base_config(),
    )
    return _save(directory, ModernBertModel(config), tokenizer)


def build_t5(directory: Path) -> Path:
    """A T5 encoder (sentence-t5 style: T5EncoderModel weights) with a Unigram tokenizer."""
    from transformers import T5Config, T5EncoderModel, T5Tokenizer

    vocab = _unigram_vocab(["<pad>", "</s>", "<unk>"], "<unk>")
    tokenizer = T5Tokenizer(vocab=vocab, extra_ids=0)
    config = T5Config(
        vocab_size=len(vocab),
        d_model=HIDDEN,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=32,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return _save(directory, T5EncoderModel(config), tokenizer)


def _qwen_tokenizer():
    from tokenizers import processors
    from transformers import Qwen2Tokenizer

    eos = "<|endoftext|>"
    vocab, merges = _bpe_vocab([eos, "<|im_start|>", "<|im_end|>"])
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        eos_token=eos,
        pad_token=eos,
        unk_token=None,
        padding_side="left",
    )
    # Qwen3-Embedding's tokenizer appends the end-of-text token, which last-token pooling reads.
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B:1 {eos}:1", special_tokens=[(eos, vocab[eos])]
    )
    return tokenizer, len(vocab), vocab[eos]


def _qwen(directory: Path, config_cls, model_cls, **extra) -> Path:
    tokenizer, size, eos_id = _qwen_tokenizer()
    config = config_cls(
        vocab_size=size,
        num_key_value_heads=2,
        pad_token_id=eos_id,
        eos_token_id=eos_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        **_base_config(),
        **extra,
    )
    return _save(directory, model_cls(config), tokenizer)


def build_qwen2(directory: Path) -> Path:
    """A Qwen2 decoder with a left-padding byte-level BPE tokenizer that appends end-of-text."""
    from transformers import Qwen2Config, Qwen2Model

    return _qwen(directory, Qwen2Config, Qwen2Model)


def build_qwen3(directory: Path) -> Path:
    """A Qwen3 decoder (Qwen3-Embedding style: left padding, end-of-text appended)."""
    from transformers import Qwen3Config, Qwen3Model

    return _qwen(directory, Qwen3Config, Qwen3Model, head_dim=8)


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "bert": build_bert,
    "roberta": build_roberta,
    "xlm-roberta": build_xlm_roberta,
    "mpnet": build_mpnet,
    "distilbert": build_distilbert,
    "deberta-v2": build_deberta_v2,
    "modernbert": build_modernbert,
    "electra": build_electra,
    "t5": build_t5,
    "qwen2": build_qwen2,
    "qwen3": build_qwen3,
}

# How sentence-transformers models of each family are usually assembled.
TYPICAL_HEADS: dict[str, dict] = {
    "t5": {"pooling": "mean", "dense": [(HIDDEN, 24, "Identity", False)], "normalize": True},
    "qwen2": {"pooling": "lasttoken", "normalize": True},
    "qwen3": {"pooling": "lasttoken", "normalize": True},
}


def st_folder(
    hf_dir: Path,
    out: Path,
    *,
    pooling: str | tuple[str, ...] = "mean",
    include_prompt: bool = True,
    dense: list[tuple[int, int, str, bool]] | None = None,
    layer_norm: bool = False,
    normalize: bool = True,
    prompts: dict[str, str] | None = None,
    default_prompt_name: str | None = None,
    max_seq_length: int = 48,
    seed: int = 0,
) -> Path:
    """Wrap ``hf_dir`` as a sentence-transformers folder, saved by sentence-transformers itself.

    Args:
        dense: ``(in, out, activation class name in torch.nn, bias)`` per Dense module, after
            pooling, in order.
        layer_norm: a LayerNorm module after the Dense modules (random affine weights).
    """
    import torch
    from sentence_transformers import SentenceTransformer, models

    torch.manual_seed(seed)
    transformer = models.Transformer(str(hf_dir), max_seq_length=max_seq_length)
    width = transformer.get_embedding_dimension()
    pool = models.Pooling(width, pooling_mode=pooling, include_prompt=include_prompt)
    modules: list = [transformer, pool]
    width = pool.get_embedding_dimension()
    for in_features, out_features, activation, bias in dense or []:
        modules.append(
            models.Dense(
                in_features,
                out_features,
                bias=bias,
                activation_function=getattr(torch.nn, activation)(),
            )
        )
        width = out_features
    if layer_norm:
        norm = models.LayerNorm(width)
        with torch.no_grad():
            norm.norm.weight.uniform_(0.5, 1.5)
            norm.norm.bias.uniform_(-0.1, 0.1)
        modules.append(norm)
    if normalize:
        modules.append(models.Normalize())
    model = SentenceTransformer(
        modules=modules, device="cpu", prompts=prompts, default_prompt_name=default_prompt_name
    )
    model.save(str(out))
    return out
