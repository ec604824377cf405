"""The modules a sentence-transformers chain may hold after Pooling: Dense, LayerNorm, Normalize
and Dropout, read from and written to the same folders sentence-transformers uses.

Each is a small ``nn.Module`` mapping sentence vectors ``(B, d_in)`` to ``(B, d_out)``. A module
folder holds ``config.json`` and, for Dense and LayerNorm, ``model.safetensors`` with the
parameter names sentence-transformers uses (``linear.weight``, ``norm.bias``, ...), so a folder
written here loads there and back. Weights are checked before use: every expected tensor present
with its shape, nothing else, all finite. A Dense activation is built only from the activation
classes of ``torch.nn`` (named as sentence-transformers saves them, e.g.
``torch.nn.modules.activation.Tanh``); code named by a model folder is never imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from sbert_core.errors import ModelLoadError
from sbert_core.model.json_files import read_json_object
from sbert_core.model.safetensors_header import check_safetensors

HeadKind = Literal["dense", "layer_norm", "normalize", "dropout"]
HEAD_KINDS: dict[str, HeadKind] = {
    "Dense": "dense",
    "LayerNorm": "layer_norm",
    "Normalize": "normalize",
    "Dropout": "dropout",
}
WEIGHTS_FILE = "model.safetensors"
PICKLE_WEIGHTS_FILE = "pytorch_model.bin"
# The only input a head module may read: the pooled vector (token-level Dense layers, as in
# ColBERT-style models, need token embeddings this encoder does not carry past pooling).
_SENTENCE_EMBEDDING = "sentence_embedding"
# Activation classes of torch.nn that take no arguments; the ones sentence-transformers models use.
_ACTIVATION_MODULES = ("torch.nn.modules.activation", "torch.nn.modules.linear")


class Dense(nn.Module):
    """``activation(x W^T + b)``, plus ``x`` (or ``x R^T``) when ``use_residual`` is set.

    Args:
        in_features: input width.
        out_features: output width.
        bias: whether the linear layer has a bias.
        activation: a ``torch.nn`` activation class name (``Tanh``, ``Identity``, ``ReLU``...).
        use_residual: add the input back (through a bias-free projection if widths differ).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        activation: str = "Tanh",
        use_residual: bool = False,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.use_residual = use_residual
        self.activation_name = activation
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = activation_class(activation)()
        if use_residual and in_features != out_features:
            self.residual = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, in_features)`` -> ``(B, out_features)``."""
        out = self.activation(self.linear(x))
        if self.use_residual:
            out = out + (x if self.in_features == self.out_features else self.residual(x))
        return out

    def config(self) -> dict:
        """``config.json`` as sentence-transformers writes it."""
        config = {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "bias": self.linear.bias is not None,
            "activation_function": _activation_path(self.activation_name),
        }
        if self.use_residual:
            config["use_residual"] = True
        return config


class LayerNorm(nn.Module):
    """``nn.LayerNorm(dimension)`` over the sentence vector (default eps, affine)."""

    def __init__(self, dimension: int) -> None:
        super().__init__()
        self.dimension = dimension
        self.norm = nn.LayerNorm(dimension)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, d)`` -> ``(B, d)``."""
        return self.norm(x)

    def config(self) -> dict:
        """``config.json`` as sentence-transformers writes it."""
        return {"dimension": self.dimension}


class Normalize(nn.Module):
    """L2 normalisation of each sentence vector."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, d)`` -> ``(B, d)`` with unit rows (a zero row stays zero)."""
        return F.normalize(x, p=2, dim=-1)

    def config(self) -> dict:
        """``config.json``: nothing to record."""
        return {}


class Dropout(nn.Module):
    """Dropout on the sentence vector (identity at inference, active while training)."""

    def __init__(self, dropout: float = 0.2) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, d)`` -> ``(B, d)``."""
        return self.dropout(x)

    def config(self) -> dict:
        """``config.json`` as sentence-transformers writes it."""
        return {"dropout": self.dropout.p}


HeadModule = Dense | LayerNorm | Normalize | Dropout
# What modules.json names each kind by; the classic names every sentence-transformers version reads.
MODULE_TYPES: dict[HeadKind, str] = {
    "dense": "sentence_transformers.models.Dense",
    "layer_norm": "sentence_transformers.models.LayerNorm",
    "normalize": "sentence_transformers.models.Normalize",
    "dropout": "sentence_transformers.models.Dropout",
}


def kind_of(module: nn.Module) -> HeadKind:
    """The kind of a head module instance."""
    return HEAD_KINDS[type(module).__name__]


def activation_class(name: str) -> type[nn.Module]:
    """The ``torch.nn`` activation class for a name as saved (``torch.nn.modules.activation.Tanh``,
    ``torch.nn.Tanh`` or ``Tanh``); ``Identity`` included.

    Raises:
        ModelLoadError: the name is not an argument-free activation class of ``torch.nn``.
    """
    class_name = name.rsplit(".", 1)[-1]
    prefix = name[: -len(class_name)].rstrip(".")
    candidate = getattr(nn, class_name, None)
    allowed_prefixes = {"", "torch.nn", *(getattr(candidate, "__module__", None) or "-",)}
    if (
        not isinstance(candidate, type)
        or not issubclass(candidate, nn.Module)
        or candidate.__module__ not in _ACTIVATION_MODULES
        or (candidate.__module__ == "torch.nn.modules.linear" and class_name != "Identity")
        or prefix not in allowed_prefixes
    ):
        raise ModelLoadError(
            f"Dense activation {name!r} is not supported: only the activation classes of "
            "torch.nn (e.g. torch.nn.modules.activation.Tanh, torch.nn.modules.linear.Identity) "
            "are built; code named by a model folder is never imported"
        )
    try:
        candidate()
    except TypeError as err:
        raise ModelLoadError(f"Dense activation {name!r} needs arguments ({err})") from err
    return candidate


def _activation_path(name: str) -> str:
    cls = activation_class(name)
    return f"{cls.__module__}.{cls.__name__}"


def load_head_module(
    kind: HeadKind, folder: Path, *, allow_pickle: bool = False, width: int | None = None
) -> HeadModule:
    """Build a head module from its sentence-transformers folder and load its checked weights.

    Args:
        kind: what ``modules.json`` says the folder holds.
        folder: the module folder (may be absent for Normalize, which has no files).
        allow_pickle: accept ``pytorch_model.bin`` weights (they can run code when read).
        width: the width of the vectors reaching this module, checked against its config.

    Raises:
        ModelLoadError: an unreadable or inconsistent config, an unsupported activation or
            input, missing/foreign/misshapen/non-finite weights; the message names the file.
    """
    config_file = folder / "config.json"
    config = read_json_object(config_file) if config_file.is_file() else {}
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, _SENTENCE_EMBEDDING) not in (None, _SENTENCE_EMBEDDING):
            raise ModelLoadError(
                f"{config_file}: {key} {config[key]!r} is not supported (head modules act on the "
                f"pooled '{_SENTENCE_EMBEDDING}' only)"
            )
    if kind == "normalize":
        return Normalize()
    if kind == "dropout":
        rate = config.get("dropout", 0.2)
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate < 1:
            raise ModelLoadError(f"{config_file}: dropout must be a number in [0, 1), got {rate!r}")
        return Dropout(float(rate))
    if not config_file.is_file():
        raise ModelLoadError(f"{config_file}: missing (the {kind} module's config)")
    module: HeadModule
    if kind == "dense":
        in_features = _positive_int(config, "in_features", config_file)
        out_features = _positive_int(config, "out_features", config_file)
        bias = config.get("bias", True)
        use_residual = config.get("use_residual", False)
        if not isinstance(bias, bool) or not isinstance(use_residual, bool):
            raise ModelLoadError(f"{config_file}: bias and use_residual must be true or false")
        # sentence-transformers' Dense defaults to Tanh when the config names no activation.
        activation = config.get("activation_function") or "torch.nn.modules.activation.Tanh"
        if not isinstance(activation, str):
            raise ModelLoadError(f"{config_file}: activation_function must be a class name")
        try:
            module = Dense(
                in_features,
                out_features,
                bias=bias,
                activation=activation,
                use_residual=use_residual,
            )
        except ModelLoadError as err:
            raise ModelLoadError(f"{config_file}: {err}") from err
        expected_in = in_features
    else:
        expected_in = _positive_int(config, "dimension", config_file)
        module = LayerNorm(expected_in)
    if width is not None and width != expected_in:
        raise ModelLoadError(
            f"{config_file}: the module takes {expected_in}-d vectors, but the modules before it "
            f"give {width}-d ones"
        )
    _load_weights(module, folder, allow_pickle=allow_pickle)
    return module


def save_head_module(module: HeadModule, folder: Path) -> None:
    """Write ``config.json`` (and ``model.safetensors`` for modules with weights) to ``folder``."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(module.config(), indent=2) + "\n", "utf-8")
    state = {
        name: tensor.detach().to("cpu", torch.float32).contiguous()
        for name, tensor in module.state_dict().items()
    }
    if state:
        save_file(state, str(folder / WEIGHTS_FILE))


def head_weight_file(folder: Path) -> Path | None:
    """The weights file a module folder holds (safetensors first, as loading picks), or None."""
    for name in (WEIGHTS_FILE, PICKLE_WEIGHTS_FILE):
        if (folder / name).is_file():
            return folder / name
    return None


def out_width(module: HeadModule, width: int) -> int:
    """Width of the vectors ``module`` gives for ``width``-d input."""
    return module.out_features if isinstance(module, Dense) else width


def truncate(embeddings: torch.Tensor, dim: int | None) -> torch.Tensor:
    """The first ``dim`` components of each vector (Matryoshka truncation); None keeps all."""
    return embeddings if dim is None else embeddings[..., :dim]


def check_truncate_dim(dim: int | None, full_dim: int) -> int | None:
    """Return ``dim`` if it is None or in ``[1, full_dim]``, else raise ``ValueError``."""
    if dim is None:
        return None
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= full_dim:
        raise ValueError(
            f"truncate_dim must be an integer in [1, {full_dim}] (the model's dimension), "
            f"got {dim!r}"
        )
    return dim


def _load_weights(module: nn.Module, folder: Path, *, allow_pickle: bool) -> None:
    expected = {name: tuple(t.shape) for name, t in module.state_dict().items()}
    single = folder / WEIGHTS_FILE
    pickled = folder / PICKLE_WEIGHTS_FILE
    if single.is_file():
        from safetensors import safe_open

        check_safetensors(single)
        try:
            with safe_open(str(single), framework="pt") as handle:
                state = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
        except (OSError, ValueError, RuntimeError) as err:
            raise ModelLoadError(f"{single}: corrupt safetensors file ({err})") from err
        source = single
    elif pickled.is_file():
        if not allow_pickle:
            raise ModelLoadError(
                f"{pickled}: pickle weights can execute code when loaded and are refused; "
                "convert the model to safetensors, or pass allow_pickle=True (--allow-pickle) "
                "if you trust its source"
            )
        try:
            state = torch.load(pickled, map_location="cpu", weights_only=True)
        except Exception as err:  # any unpickling failure is a corrupt file to the user
            raise ModelLoadError(f"{pickled}: unreadable weights ({err})") from err
        source = pickled
    else:
        raise ModelLoadError(f"{folder}: no {WEIGHTS_FILE} for the {type(module).__name__} module")
    if not isinstance(state, dict):
        raise ModelLoadError(f"{source}: not a tensor dictionary")
    for name in sorted(set(expected) | set(state)):
        if name not in state:
            raise ModelLoadError(f"{source}: tensor {name!r} is missing")
        if name not in expected:
            raise ModelLoadError(
                f"{source}: tensor {name!r} is not a parameter of the {type(module).__name__} "
                "described by config.json"
            )
        tensor = state[name]
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != expected[name]:
            shape = (
                list(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            )
            raise ModelLoadError(
                f"{source}: tensor {name!r} has shape {shape}, config.json needs "
                f"{list(expected[name])}"
            )
        if not np.isfinite(tensor.detach().float().numpy()).all():
            raise ModelLoadError(f"{source}: tensor {name!r} has NaN or infinite values")
    module.load_state_dict({name: state[name].float() for name in expected})


def _positive_int(config: dict, key: str, source: Path) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelLoadError(f"{source}: {key} must be a positive integer, got {value!r}")
    return value
