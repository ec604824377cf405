"""The checks of verify's cross-encoder that its files answer, without loading weights: run by
``sbert run`` before the job's first stage (before the job folder is made) and by ``sbert
verify`` before it reads any pair, so a missing folder, a folder that is no cross-encoder, or
one that gives several scores per pair (an NLI model's three labels) is refused before anything
is computed, with what verify needs and how to get it (:data:`HOW_TO_GET_ONE`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sbert_core.errors import ModelLoadError

# What every refusal of verify's model ends with. It never suggests the bundled bi-encoder,
# which verify refuses.
HOW_TO_GET_ONE = (
    "verify needs a cross-encoder folder (a sentence-transformers CrossEncoder folder: a "
    "one-label classification head that scores a pair of texts); train one with `sbert "
    "finetune --config examples/cross_encoder_qqp_quick.yaml` (about 45 minutes on 2 CPU cores; "
    "examples/cross_encoder_qqp.yaml is the full recipe), or, with a network, name a Hugging "
    "Face Hub cross-encoder such as cross-encoder/quora-distilroberta-base"
)
# A name a Hub id could be: NAME or OWNER/NAME.
_HUB_SHAPE = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
# Exception class names (anywhere in the cause chain) that mean the Hub could not be asked.
_UNREACHABLE = ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectError", "Connection")


def require_one_score(model: str, num_labels: int, key: str = "--model") -> None:
    """Refuse a cross-encoder that gives ``num_labels`` != 1 scores per pair.

    Raises:
        ValueError: naming the option ``key``, the model and its label count.
    """
    if num_labels != 1:
        raise ValueError(
            f"{key} {model}: the cross-encoder gives {num_labels} scores per pair; verify "
            f"needs one (a duplicate score). {HOW_TO_GET_ONE}"
        )


def check_cross_encoder(model: str, key: str = "--model") -> None:
    """Refuse ``model`` unless it is a cross-encoder folder (or a Hub cross-encoder that can be
    fetched) with one score per pair, from its configuration files (modules, ``config.json``,
    tokenizer); no weight is read.

    Args:
        model: what the user named: a folder, or a Hugging Face Hub id.
        key: how messages name the setting (``--model``, ``model`` in a job's verify section).

    Raises:
        ModelLoadError: no such folder (nor, for a name shaped like a Hub id that is no local
            path, a model of that name on the Hub), a folder of another model type (a
            bi-encoder), an unreadable config or tokenizer, an unsupported architecture.
        ValueError: several scores per pair (:func:`require_one_score`).
    """
    from sbert_core.model.cross_encoder_folder import (
        read_config_and_tokenizer,
        read_cross_encoder_layout,
    )

    try:
        directory = _model_folder(model)
        layout = read_cross_encoder_layout(directory)
        config, _ = read_config_and_tokenizer(layout, directory)
    except ModelLoadError as err:
        raise ModelLoadError(f"{key} {model}: {err}. {HOW_TO_GET_ONE}") from None
    require_one_score(model, int(config.num_labels), key)


def looks_like_a_path(name: str) -> bool:
    """Whether ``name`` can only be a local path, never a Hub id: it starts with ``.``, ``/``
    or ``~``, has a backslash, a scheme, or more than one ``/``, is not shaped like a Hub id,
    or its first folder exists here (``runs/`` of ``runs/my-model``)."""
    if name.startswith((".", "/", "~")) or "\\" in name or "://" in name:
        return True
    if not _HUB_SHAPE.match(name):
        return True
    first, slash, _ = name.partition("/")
    return bool(slash) and Path(first).is_dir()


def _model_folder(model: str) -> Path:
    """The local folder of ``model``: itself, or the Hub snapshot of a name shaped like a Hub
    id that is no local path.

    Raises:
        ModelLoadError: no such folder (a missing path is never called a Hub id), or a file.
    """
    from sbert_core.model.source import CROSS_ENCODERS, resolve_model_dir

    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise ModelLoadError("a file, not a folder")
    if looks_like_a_path(model):
        raise ModelLoadError("no such folder")
    try:
        directory, _ = resolve_model_dir(model, organization=CROSS_ENCODERS)
    except ModelLoadError as err:
        raise ModelLoadError(_not_found_anywhere(err)) from None
    return directory


def _not_found_anywhere(err: BaseException) -> str:
    """No such folder, and why the Hub gave no model: unreachable, no such model, or the
    error's name."""
    chain, cause = [], err
    while cause is not None and len(chain) < 8:
        chain.append(type(cause).__name__)
        cause = cause.__cause__ or cause.__context__
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}
    if offline or any(part in name for name in chain for part in _UNREACHABLE):
        return (
            "no such folder here (and the Hugging Face Hub, where a name like it could be a "
            "model's, cannot be reached: no network, or HF_HUB_OFFLINE is set)"
        )
    if any("NotFound" in name for name in chain):
        return "no such folder here, nor a public model of that name on the Hugging Face Hub"
    return f"no such folder here, and fetching it from the Hugging Face Hub failed ({chain[-1]})"
