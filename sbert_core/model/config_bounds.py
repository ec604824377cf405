"""Refusing a ``config.json`` that cannot describe its weights, before any model is built.

Building a model, even on the ``meta`` device, takes time and memory in proportion to the
layers its config names: a config claiming 100,000 layers beside the weights of 2 took 270 s and
7.3 GB to refuse. The checks here read only the config, the weight files' sizes and the
safetensors headers, so they take milliseconds whatever the config claims:

* every size field (``num_hidden_layers``, ``hidden_size``, ``vocab_size``, ...) must be a whole
  number in a range far beyond any released model, and for the architectures of
  :data:`FAMILIES`, ``hidden_size`` a multiple of ``num_attention_heads`` unless a head size is
  given;
* for those architectures, the parameters the config implies (a lower bound: the attention and
  feed-forward matrices of every layer, the token and learned position embeddings) must fit in
  what the weight files hold: the elements the safetensors headers list, or for pickle weights
  their bytes.

The bound never exceeds the parameters the architecture really has, and every one of those must
be in the weights (the coverage check of :mod:`sbert_core.model.weight_checks` refuses any that is
missing; pickle weights are checked after loading), so a model this library would load is never
refused here. Architectures outside :data:`FAMILIES` get the range checks only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sbert_core.errors import ModelLoadError
from sbert_core.model.artifact import inside_model_dir
from sbert_core.model.json_files import read_json_object
from sbert_core.model.safetensors_header import safetensors_header

# Far beyond any released model (the largest have ~130 layers, hidden size ~25,000, 128 heads,
# vocabularies of ~260,000, contexts of ~10M tokens). The layer limit also bounds the time an
# architecture without an estimate takes to be built on the meta device (about 1 s at 512).
LIMITS = {
    "num_hidden_layers": 512,
    "hidden_size": 65_536,
    "num_attention_heads": 1_024,
    "vocab_size": 1 << 23,
    "intermediate_size": 1 << 20,
    "d_ff": 1 << 20,
    "hidden_dim": 1 << 20,
    "num_key_value_heads": 1_024,
    "head_dim": 65_536,
    "attention_head_size": 65_536,
    "embedding_size": 65_536,
    "max_position_embeddings": 1 << 27,
}
# Checked for every architecture; the other fields of LIMITS only where FAMILIES says the
# architecture uses them (elsewhere the same names may hold something else, or be stray).
_COMMON_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
# A config implying up to this many times the parameters the weights hold is left to the
# coverage check of sbert_core.model.weight_checks, which names the first missing tensor: the
# estimate is a lower bound, so a config slightly off (3 layers for the weights of 2) gets there,
# while one implying 10,000 layers does not.
MARGIN = 2


@dataclass(frozen=True)
class Family:
    """Where an architecture's config keeps the sizes the estimate needs.

    Attributes:
        intermediate: the feed-forward width's attribute.
        head_dim: the attribute of an explicit per-head width, if any (else hidden / heads).
        kv_heads: grouped-query attention: k and v have ``num_key_value_heads`` heads.
        gated: the feed-forward has two matrices in (gate and up) and one out.
        embedding: the attribute of a token embedding width other than ``hidden_size``.
        learned_positions: a learned position embedding of ``max_position_embeddings`` rows.
        positions_flag: a config flag that must be true for those positions to exist.
    """

    intermediate: str = "intermediate_size"
    head_dim: str | None = None
    kv_heads: bool = False
    gated: bool = False
    embedding: str | None = None
    learned_positions: bool = False
    positions_flag: str | None = None

    def fields(self) -> tuple[str, ...]:
        """The size attributes this family's estimate reads."""
        optional = (
            self.head_dim,
            "num_key_value_heads" if self.kv_heads else None,
            self.embedding,
            "max_position_embeddings" if self.learned_positions else None,
        )
        return (*_COMMON_FIELDS, self.intermediate, *filter(None, optional))


_BERT_LIKE = Family(learned_positions=True)
_T5_LIKE = Family(intermediate="d_ff", head_dim="head_dim")  # transformers maps head_dim to d_kv
_DECODER = Family(head_dim="head_dim", kv_heads=True, gated=True)
# Architectures whose layers each hold their own attention and feed-forward matrices (no layer
# sharing as in ALBERT, no experts), so the estimate is a lower bound for them.
FAMILIES = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "camembert": _BERT_LIKE,
    "mpnet": _BERT_LIKE,
    "electra": Family(embedding="embedding_size", learned_positions=True),
    # DistilBERT's positions may be fixed sinusoids; they are not counted. T5's feed-forward is
    # gated or not (feed_forward_proj); it is counted as not.
    "distilbert": Family(intermediate="hidden_dim"),
    "deberta-v2": Family(
        head_dim="attention_head_size",
        embedding="embedding_size",
        learned_positions=True,
        positions_flag="position_biased_input",
    ),
    "modernbert": Family(gated=True),
    "t5": _T5_LIKE,
    "mt5": _T5_LIKE,
    "umt5": _T5_LIKE,
    "qwen2": _DECODER,
    "qwen3": _DECODER,
    "llama": _DECODER,
    "mistral": _DECODER,
    "gemma": _DECODER,
    "gemma2": _DECODER,
}


@dataclass(frozen=True)
class ConfigField:
    """A size field of a config: its name in ``config.json`` and its value."""

    name: str
    value: int

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


@dataclass(frozen=True)
class Term:
    """A part of the implied parameter count: ``count`` repetitions of ``each`` parameters.

    Attributes:
        count: the field that repeats (layers, vocabulary rows, positions).
        widths: the fields that size one repetition.
        each: parameters in one repetition.
    """

    count: ConfigField
    widths: tuple[ConfigField, ...]
    each: int

    @property
    def parameters(self) -> int:
        """Parameters of the whole term."""
        return self.count.value * self.each


@dataclass(frozen=True)
class WeightCapacity:
    """The most parameters the weight files can hold.

    Attributes:
        parameters: tensor elements counted from the safetensors headers, or for pickle weights
            their bytes (no element takes less than a byte).
        size: bytes of the weight files.
        counted: True when ``parameters`` was counted from headers.
    """

    parameters: int
    size: int
    counted: bool

    def __str__(self) -> str:
        if self.counted:
            return f"{self.parameters:.3g} ({_bytes(self.size)})"
        return f"at most {self.parameters:.3g} (pickle files of {_bytes(self.size)})"


def check_config_against_weights(config, files: list[Path], source: Path) -> None:
    """Refuse a config whose sizes are absurd or cannot fit the weights, building nothing.

    In order: every size field must be a whole number of at least 1; for the architectures of
    :data:`FAMILIES` without an explicit head size, ``hidden_size`` a multiple of
    ``num_attention_heads``; the parameters the config implies within what the weights hold
    (with a margin of :data:`MARGIN`); every size field at most its limit in :data:`LIMITS`.
    The weights are compared before the limits as theirs is the more telling message.

    Args:
        config: the ``transformers`` config read from ``source``.
        files: the weight files :func:`sbert_core.model.artifact.weight_files` returned.
        source: the ``config.json`` to name.

    Raises:
        ModelLoadError: naming ``source`` and the field at fault.
    """
    family = FAMILIES.get(_model_type(config))
    attributes = family.fields() if family else _COMMON_FIELDS
    for attribute in attributes:
        value = getattr(config, attribute, None)
        if value is not None and not _positive_whole(value):
            raise ModelLoadError(
                f"{source}: {_json_name(config, attribute)}={value!r} is not a whole number of "
                "at least 1 (a damaged or hand-edited config.json?)"
            )
    if family:
        _check_heads_divide(config, family, source)
        _check_fits_weights(config, files, source)
    for attribute in attributes:
        value = getattr(config, attribute, None)
        if value is not None and value > LIMITS[attribute]:
            raise ModelLoadError(
                f"{source}: {_json_name(config, attribute)}={value} is beyond any real model "
                f"(at most {LIMITS[attribute]:,} here; a damaged or hand-edited config.json?)"
            )


def implied_parameters(config) -> list[Term]:
    """A lower bound of the parameters of ``config``'s base model, as the terms it sums.

    Empty for an architecture outside :data:`FAMILIES`. Expects the size fields to be whole
    numbers of at least 1 (as :func:`check_config_against_weights` checks first).
    """
    family = FAMILIES.get(_model_type(config))
    hidden = _field(config, "hidden_size")
    if family is None or hidden is None:
        return []
    embedding = (_field(config, family.embedding) if family.embedding else None) or hidden
    terms = [_layer_term(config, family, hidden)]
    vocab = _field(config, "vocab_size")
    if vocab is not None:
        terms.append(Term(vocab, (embedding,), embedding.value))
    positions = _field(config, "max_position_embeddings")
    if positions is not None and _learned_positions(config, family):
        terms.append(Term(positions, (embedding,), embedding.value))
    return [term for term in terms if term is not None]


def weight_capacity(files: list[Path]) -> WeightCapacity:
    """How many parameters ``files`` (as :func:`~sbert_core.model.artifact.weight_files` lists them)
    can hold, read from headers and file sizes only.

    Raises:
        ModelLoadError: a corrupt safetensors header, or a pickle shard that is missing.
    """
    if files[0].suffix == ".safetensors":
        elements = sum(_elements(path) for path in files)
        return WeightCapacity(elements, sum(path.stat().st_size for path in files), True)
    size = sum(path.stat().st_size for path in _pickle_data_files(files))
    return WeightCapacity(size, size, False)


def _check_heads_divide(config, family: Family, source: Path) -> None:
    """Without an explicit head size, the heads split ``hidden_size`` evenly."""
    hidden, heads = _field(config, "hidden_size"), _field(config, "num_attention_heads")
    if _head_dim(config, family) or not hidden or not heads or hidden.value % heads.value == 0:
        return
    raise ModelLoadError(
        f"{source}: {hidden} is not a multiple of {heads} (a damaged or hand-edited config.json?)"
    )


def _check_fits_weights(config, files: list[Path], source: Path) -> None:
    terms = implied_parameters(config)
    if not terms:
        return
    capacity = weight_capacity(files)
    total = sum(term.parameters for term in terms)
    if total <= MARGIN * capacity.parameters:
        return
    culprit = max(terms, key=lambda term: term.parameters)
    raise ModelLoadError(
        f"{source}: {_blame(culprit, capacity)} implies at least {total:.3g} parameters "
        f"({_bytes(4 * total)} in float32), but the weights hold {capacity}; this config.json "
        "does not describe these weights"
    )


def _positive_whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _layer_term(config, family: Family, hidden: ConfigField) -> Term | None:
    """Every layer's attention (q, k, v, output) and feed-forward matrices.

    Attention: q, k and v map the hidden state to the heads' widths; the output maps back,
    from the heads' width (or, in DeBERTa, from the hidden width, so the smaller is counted).
    Feed-forward: one matrix in and one out, or two in for a gated family.
    """
    layers = _field(config, "num_hidden_layers")
    heads = _field(config, "num_attention_heads")
    intermediate = _field(config, family.intermediate)
    if layers is None or heads is None or intermediate is None:
        return None
    head_dim = _head_dim(config, family)
    width = head_dim.value if head_dim else hidden.value // heads.value
    kv_heads = (_field(config, "num_key_value_heads") if family.kv_heads else None) or heads
    h = hidden.value
    attention = h * width * (heads.value + 2 * kv_heads.value) + h * min(h, heads.value * width)
    feed_forward = (3 if family.gated else 2) * h * intermediate.value
    widths = (hidden, intermediate, heads, *(f for f in (kv_heads, head_dim) if f and f != heads))
    return Term(layers, widths, attention + feed_forward)


def _blame(term: Term, capacity: WeightCapacity) -> str:
    """The fields of ``term`` to name, the one at fault first: the count when one repetition
    fits in the weights (10,000 layers of a sane width), else the widths."""
    if term.each <= capacity.parameters:
        first, rest = (term.count,), term.widths
    else:
        first, rest = term.widths, (term.count,)
    return f"{', '.join(map(str, first))} (with {', '.join(map(str, rest))})"


def _learned_positions(config, family: Family) -> bool:
    if family.positions_flag and not getattr(config, family.positions_flag, True):
        return False
    return family.learned_positions


def _head_dim(config, family: Family) -> ConfigField | None:
    return _field(config, family.head_dim) if family.head_dim else None


def _model_type(config) -> str:
    return str(getattr(config, "model_type", ""))


def _field(config, attribute: str) -> ConfigField | None:
    """``attribute`` of ``config`` under its ``config.json`` name, None when unset."""
    value = getattr(config, attribute, None)
    if value is None:
        return None
    return ConfigField(_json_name(config, attribute), int(value))


def _json_name(config, attribute: str) -> str:
    # transformers maps common names onto each family's own (DistilBERT: n_layers, T5: d_model).
    return str((getattr(config, "attribute_map", None) or {}).get(attribute, attribute))


def _elements(path: Path) -> int:
    try:
        return sum(
            math.prod(int(n) for n in info["shape"])
            for name, info in safetensors_header(path).items()
            if name != "__metadata__"
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ModelLoadError(f"{path}: corrupt safetensors file (bad tensor shape: {err})") from err


def _pickle_data_files(files: list[Path]) -> list[Path]:
    """The pickle files ``from_pretrained`` reads: ``pytorch_model.bin``, else the shards its
    index names."""
    single = [path for path in files if path.suffix == ".bin"]
    if single:
        return single
    index = files[0]
    weight_map = read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelLoadError(f"{index}: no weight_map naming the shard files")
    shards = [
        inside_model_dir(index.parent, name, index) for name in sorted(set(weight_map.values()))
    ]
    for shard in shards:
        if not shard.is_file():
            raise ModelLoadError(f"{index}: shard {shard.name} is missing")
    return shards


def _bytes(size: int) -> str:
    if size >= 1e9:
        return f"{size / 1e9:.1f} GB"
    return f"{size / 1e6:.1f} MB"
