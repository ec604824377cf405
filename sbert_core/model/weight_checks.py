"""Checking that weight files really are the model their ``config.json`` describes.

A folder whose safetensors hold tensors of another model (or none that match) loads without
complaint in ``transformers``: the missing parameters get random values and the encoder embeds
noise. These checks run before any job touches its output and name the file and the first bad
tensor:

* :func:`check_weight_coverage` compares the safetensors *headers* (names and shapes, no data)
  with the parameters of the architecture built on the ``meta`` device (no tensor memory, no
  init). Building still costs time and memory per module, so it runs only after
  :mod:`sbert_core.model.config_bounds` has checked the config's sizes against the weights.
* :func:`check_finite_weights` reads the tensors one at a time (memory-mapped) and refuses NaN
  or infinite values.

Pickle checkpoints (``--allow-pickle``) cannot be inspected without unpickling them; they are
checked after loading instead (:func:`check_loaded_model`).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sbert_core.errors import ModelLoadError

# Old BERT checkpoints name LayerNorm parameters as TensorFlow did; transformers renames them.
_LEGACY_NAMES = ((".gamma", ".weight"), (".beta", ".bias"))
# Parameters the encoder never uses: it pools ``last_hidden_state``, not the pooler output, and
# many sentence-transformers checkpoints are saved without the pooler, so it may be missing.
_UNUSED_PREFIXES = ("pooler.",)


def expected_parameters(config) -> tuple[str, dict[str, tuple[int, ...]], set[str], nn.Module]:
    """The architecture's parameters, built on the meta device (nothing allocated).

    Returns:
        ``(base_model_prefix, {name: shape}, buffer names, the meta model)``; tied parameters
        appear under each of their names.
    """
    # The class that will load the weights: T5-family folders hold only the encoder.
    from sbert_core.model.architectures import build_from_config

    try:
        with torch.device("meta"):
            model = build_from_config(config)
    except (ValueError, KeyError, TypeError, RuntimeError) as err:
        raise ModelLoadError(
            f"config.json describes no model this library can build ({err})"
        ) from err
    parameters = {
        name: tuple(tensor.shape)
        for name, tensor in model.state_dict(keep_vars=True).items()
        if isinstance(tensor, nn.Parameter)
    }
    buffers = {name for name, _ in model.named_buffers()}
    return str(getattr(model, "base_model_prefix", "") or ""), parameters, buffers, model


def _tied_names(model: nn.Module) -> dict[str, frozenset[str]]:
    """Each parameter name -> every name of the same (tied) parameter."""
    aliases: dict[int, set[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if isinstance(tensor, nn.Parameter):
            aliases.setdefault(id(tensor), set()).add(name)
    return {name: frozenset(group) for group in aliases.values() for name in group}


def check_weight_coverage(
    tensors: dict[str, tuple[Path, tuple[int, ...]]], config, described_by: Path
) -> None:
    """Refuse weights that do not cover the architecture exactly.

    Args:
        tensors: every tensor of the checkpoint: ``{name: (file, shape)}`` from the headers.
        config: the ``transformers`` config the model will be built from.
        described_by: the file to name for a missing tensor (the weights or the shard index).

    Raises:
        ModelLoadError: a parameter is missing, a tensor has another shape than its parameter,
            or a tensor in the base model's namespace is not one of its parameters or buffers
            (tensors of a task head outside the base model, e.g. ``cls.*`` next to ``bert.*``,
            are ignored, as ``transformers`` ignores them).
    """
    prefix, parameters, buffers, model = expected_parameters(config)
    names = {_modern_name(name): name for name in tensors}
    if prefix and not set(names) & set(parameters):
        # A task model's checkpoint (``bert.encoder...``): its base model is what we load.
        names = {
            name[len(prefix) + 1 :]: original
            for name, original in names.items()
            if name.startswith(prefix + ".")
        }
    ignored_missing = _patterns(model, "_keys_to_ignore_on_load_missing")
    ignored_unexpected = _patterns(model, "_keys_to_ignore_on_load_unexpected")
    architecture = type(model).__name__
    for name in sorted(names):
        path, shape = tensors[names[name]]
        if name in parameters:
            if tuple(shape) != parameters[name]:
                raise ModelLoadError(
                    f"{path}: tensor {names[name]!r} has shape {list(shape)}, but the "
                    f"{architecture} of config.json needs {list(parameters[name])}"
                )
        elif name not in buffers and not _matches(name, ignored_unexpected):
            raise ModelLoadError(
                f"{path}: tensor {names[name]!r} is not a parameter of the {architecture} "
                "described by config.json (weights of another model?)"
            )
    # A tied parameter (embeddings shared with an output layer) is stored under one name only.
    tied = _tied_names(model)
    missing = sorted(
        name
        for name in parameters
        if not tied.get(name, frozenset({name})) & names.keys()
        and not _matches(name, ignored_missing)
        and not name.startswith(_UNUSED_PREFIXES)
    )
    if missing:
        raise ModelLoadError(
            f"{described_by}: tensor {missing[0]!r} is missing ({len(missing)} of the "
            f"{len(parameters)} parameters of the {architecture} described by config.json "
            "are not in the weights; loading would fill them with random values)"
        )


def check_finite_weights(path: Path) -> None:
    """Refuse a safetensors file with a NaN or infinite value, naming the first such tensor.

    Tensors are memory-mapped and checked one at a time, so memory stays at one tensor.
    """
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            for name in sorted(handle.keys()):
                tensor = handle.get_tensor(name)
                if tensor.is_floating_point() and not _all_finite(tensor):
                    raise ModelLoadError(f"{path}: tensor {name!r} has NaN or infinite values")
    except (OSError, ValueError, RuntimeError) as err:
        if isinstance(err, ModelLoadError):
            raise
        raise ModelLoadError(f"{path}: corrupt safetensors file ({err})") from err


def check_loaded_model(model: nn.Module, loading_info: dict, source: Path) -> None:
    """After ``from_pretrained``: no parameter left at random init, none non-finite.

    This is the only check pickle checkpoints get, and a second one for safetensors.

    Raises:
        ModelLoadError: naming ``source`` and the first missing, mismatched or non-finite tensor.
    """
    # Unexpected tensors are not checked here: pickle checkpoints of task models carry their
    # heads (``cls.*``), which transformers rightly drops.
    for kind in ("missing_keys", "mismatched_keys"):
        keys = sorted(str(key) for key in loading_info.get(kind) or ())
        if kind == "missing_keys":
            keys = [key for key in keys if not key.startswith(_UNUSED_PREFIXES)]
        if keys:
            raise ModelLoadError(
                f"{source}: the weights do not match config.json ({kind.replace('_', ' ')}: "
                f"first {keys[0]!r}, {len(keys)} in all)"
            )
    for name, parameter in model.named_parameters():
        if not _all_finite(parameter.detach()):
            raise ModelLoadError(f"{source}: tensor {name!r} has NaN or infinite values")


def _all_finite(tensor: torch.Tensor) -> bool:
    # numpy's isfinite is ~25x faster than torch's on CPU here (0.08 s vs 1.9 s for MiniLM's
    # 90 MB); numpy has no bfloat16, so those are widened first.
    if tensor.dtype not in (torch.float16, torch.float32, torch.float64):
        tensor = tensor.float()
    return bool(np.isfinite(tensor.numpy()).all())


def _modern_name(name: str) -> str:
    for old, new in _LEGACY_NAMES:
        if name.endswith(old) and "LayerNorm" in name:
            return name[: -len(old)] + new
    return name


def _patterns(model: nn.Module, attribute: str) -> list[re.Pattern]:
    return [re.compile(pattern) for pattern in getattr(model, attribute, None) or ()]


def _matches(name: str, patterns: list[re.Pattern]) -> bool:
    return any(pattern.search(name) for pattern in patterns)


def check_weight_files(config, files: list[Path], source: Path) -> bool:
    """Check the weight files against the config before anything is built from it; returns
    whether they are pickle files (``pytorch_model.bin``), which only loading can check.

    The config's sizes against the tensors the files hold (building takes time and memory in
    proportion to the layers it claims, however few the weights hold), then for safetensors:
    every tensor the base model needs, with its shape, and every value finite.

    Raises:
        ModelLoadError: naming the file and the tensor or config key.
    """
    from sbert_core.model.artifact import SAFETENSORS_FILE, SAFETENSORS_INDEX, safetensors_tensors
    from sbert_core.model.config_bounds import check_config_against_weights

    check_config_against_weights(config, files, source / "config.json")
    if files[0].suffix != ".safetensors":
        return True
    described_by = files[0] if files[0].name == SAFETENSORS_FILE else source / SAFETENSORS_INDEX
    check_weight_coverage(safetensors_tensors(files), config, described_by)
    for path in files:
        check_finite_weights(path)
    return False
